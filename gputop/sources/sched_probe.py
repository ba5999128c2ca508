"""The eBPF scheduler probe: ``sched:sched_switch`` aggregated in kernel maps, via bcc.

``open()`` returns at once; a background thread checks the prerequisites and
has a short-lived child process compile ``bpf/sched_probe.c`` with bcc (about
half a second) and attach it (``bpf_handover``): this process never imports bcc
or LLVM, and reads the maps with ``bpf(2)`` through ctypes mirrors of the C
structs. Until then ``read()`` returns None and the sampler serves the /proc
numbers, with ``status.reason`` saying what is happening or why the probe cannot
run, and the fix.

Each ``read()`` flips the program's epoch counter (so the longest stretch of the
finished interval can be read), reads the maps in batches and returns the
differences since the previous read. An off-CPU (or on-CPU) stretch still in
progress at read time is credited up to now, so a thread that sleeps through
several intervals shows as off-CPU in each of them rather than all at once when
it wakes up.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gputop.model.frame import SourceStatus
from gputop.sources.base import ProbeReading, TaskSched
from gputop.sources.bcc_loader import INSTALL_FIX
from gputop.sources.bpf_handover import Handover, HandoverError, Spawned, receive, spawn
from gputop.sources.bpf_syscall import BpfError, BpfMap, LayoutMismatch

MAX_THREADS = 32768
MAX_TGIDS = 8192
HIST_SLOTS = 40
# Where bcc looks for a tracepoint's layout, in its own order.
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
SWEEP_EVERY_READS = 10
# The kernel's own headers (CONFIG_IKHEADERS), bcc's fallback.
KHEADERS = "/sys/kernel/kheaders.tar.xz"

_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38
_CAP_BPF = 39

_ERROR_NAMES = ("thread map full", "process map full", "current was not the outgoing task")


# ctypes mirrors of bpf/sched_probe.c's map types: change them together. Each is
# checked against the loaded program (sizes from the kernel, field names from
# bcc) before the first read.


class ThreadT(ctypes.Structure):
    """``struct thread_t``: one thread's running totals, keyed by tid."""

    _fields_ = (
        ("out_ts", ctypes.c_uint64),
        ("wake_ts", ctypes.c_uint64),
        ("in_ts", ctypes.c_uint64),
        ("runq_ns", ctypes.c_uint64),
        ("blocked_ns", ctypes.c_uint64),
        ("oncpu_ns", ctypes.c_uint64),
        ("nivcsw", ctypes.c_uint64),
        ("nvcsw", ctypes.c_uint64),
        ("missed", ctypes.c_uint64),
        ("longest_ns", ctypes.c_uint64 * 2),
        ("longest_ep", ctypes.c_uint32 * 2),
        ("tgid", ctypes.c_uint32),
        ("runnable", ctypes.c_uint32),
    )


class GroupT(ctypes.Structure):
    """``struct group_t``: one thread group's totals and histogram, keyed by tgid."""

    _fields_ = (
        ("dead_runq_ns", ctypes.c_uint64),
        ("dead_blocked_ns", ctypes.c_uint64),
        ("dead_oncpu_ns", ctypes.c_uint64),
        ("dead_nivcsw", ctypes.c_uint64),
        ("dead_nvcsw", ctypes.c_uint64),
        ("dead_missed", ctypes.c_uint64),
        ("longest_ns", ctypes.c_uint64 * 2),
        ("longest_ep", ctypes.c_uint32 * 2),
        ("hist", ctypes.c_uint64 * HIST_SLOTS),
    )


# Every map of the program: name -> (key type, value type), None for a map only
# the kernel side uses.
MAP_TYPES: dict[str, tuple[Any, Any] | None] = {
    "threads": (ctypes.c_uint32, ThreadT),
    "groups": (ctypes.c_uint32, GroupT),
    "exiting": None,
    "epoch": (ctypes.c_int32, ctypes.c_uint32),
    "errors": (ctypes.c_int32, ctypes.c_uint64),
}


def bpf_source_path() -> str:
    """The BPF C program: inside the installed package, else the source tree's ``bpf/``."""
    installed = resources.files("gputop") / "bpf" / "sched_probe.c"
    if installed.is_file():
        return str(installed)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "bpf", "sched_probe.c"))


def state_masks(format_text: str) -> tuple[int, int] | None:
    """(not-runnable bits, exiting-task bits) of sched_switch's prev_state.

    Read from the tracepoint's print format, which lists every state flag the
    kernel reports ({ 0x1, "S" }, ... { 0x80, "I" }); a prev_state with none of
    them is "R", or "R+" when the task was preempted. None when the format has
    no such list.
    """
    flags = re.findall(r"\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*\"([A-Za-z])\"\s*\}", format_text)
    if not flags:
        return None
    not_runnable = dead = 0
    for value, letter in flags:
        bit = int(value, 0)
        not_runnable |= bit
        if letter in ("X", "Z"):
            dead |= bit
    return not_runnable, dead


def has_bpf_capabilities(status_text: str) -> bool:
    """True when CapEff (from /proc/self/status) allows loading and attaching the probe."""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text, re.M)
    if m is None:
        return os.geteuid() == 0
    caps = int(m.group(1), 16)
    if caps & (1 << _CAP_SYS_ADMIN):
        return True
    return bool(caps & (1 << _CAP_BPF)) and bool(caps & (1 << _CAP_PERFMON))


def kernel_headers_present(release: str) -> str | None:
    """Where bcc will find headers to compile against, by bcc's own test; None if nowhere.

    bcc looks for ``include/linux/kconfig.h`` under ``$BCC_KERNEL_SOURCE`` or
    ``/lib/modules/RELEASE/{build,source}``, then for the kernel's built-in
    ``kheaders``. When it finds none its C library prints to stdout, which would
    corrupt ``gputop record -o -``; so this check must be at least as strict.
    """
    src = os.environ.get("BCC_KERNEL_SOURCE")
    mod = f"/lib/modules/{release}"
    roots = [src] if src else [f"{mod}/build", f"{mod}/source"]
    found = next((r for r in roots if os.path.isfile(f"{r}/include/linux/kconfig.h")), None)
    if found is None and os.path.exists(KHEADERS):
        found = KHEADERS
    return found


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why the probe cannot run here, and the fix (None when there is no simple one)."""

    reason: str
    fix: str | None


def preflight(proc_root: str = "/proc") -> tuple[int, int] | Unavailable:
    """Everything the probe needs before compiling, checked in order.

    Returns the prev_state masks or why not. Cheap and side-effect free (it does
    not import bcc: the compiler child finds bcc, and says so when it cannot),
    so ``gputop doctor`` can call it too.
    """
    status_text = _read_text(f"{proc_root}/self/status") or ""
    if not has_bpf_capabilities(status_text):
        return Unavailable(
            "needs root (or CAP_BPF + CAP_PERFMON)",
            "run gputop with sudo (or give it CAP_BPF, CAP_PERFMON and read access to tracefs)",
        )
    fmt = None
    for d in TRACEFS_DIRS:
        fmt = _read_text(f"{d}/events/sched/sched_switch/format")
        if fmt is not None:
            break
    if fmt is None:
        return Unavailable(
            "tracefs is not mounted (no sched_switch format)",
            "mount -t tracefs nodev /sys/kernel/tracing",
        )
    masks = state_masks(fmt)
    if masks is None:
        return Unavailable("cannot read prev_state flags from sched_switch's format", None)
    release = os.uname().release
    if not kernel_headers_present(release):
        return Unavailable(
            f"no kernel headers for {release}",
            f"apt-get install linux-headers-{release} (or set BCC_KERNEL_SOURCE)",
        )
    return masks


@dataclass(slots=True)
class _Cum:
    """One thread's or group's running totals, as last credited."""

    tgid: int
    runq_ns: int
    blocked_ns: int
    oncpu_ns: int
    nivcsw: int
    nvcsw: int
    missed: int = 0

    def add(self, other: _Cum) -> None:
        self.runq_ns += other.runq_ns
        self.blocked_ns += other.blocked_ns
        self.oncpu_ns += other.oncpu_ns
        self.nivcsw += other.nivcsw
        self.nvcsw += other.nvcsw
        self.missed += other.missed


def _delta(cur: _Cum, prev: _Cum | None) -> tuple[_Cum, _Cum]:
    """(this interval's change, the totals to diff against next time).

    Totals only grow, but a read can land between two stores of the probe and
    see a total a little too high or too low; keeping the higher one as the
    base makes such a glitch cost one interval's precision, never a double count.
    """
    if prev is None or prev.tgid != cur.tgid or cur.nivcsw + cur.nvcsw < prev.nivcsw + prev.nvcsw:
        return cur, cur
    fields = ("runq_ns", "blocked_ns", "oncpu_ns", "nivcsw", "nvcsw", "missed")
    d = _Cum(cur.tgid, 0, 0, 0, 0, 0)
    base = _Cum(cur.tgid, 0, 0, 0, 0, 0)
    for f in fields:
        c, p = getattr(cur, f), getattr(prev, f)
        setattr(d, f, max(0, c - p))
        setattr(base, f, max(c, p))
    return d, base


def _as_int(v: Any) -> int:
    """A map key or counter as an int (batch reads give ints, plain reads ctypes scalars)."""
    return v if isinstance(v, int) else int(v.value)


def _longest(ns: Any, ep: Any, epoch: int) -> int:
    i = epoch & 1
    return int(ns[i]) if int(ep[i]) == epoch else 0


class BpfSchedProbe:
    """Scheduler probe on ``sched:sched_switch`` (bcc, in a child); implements ``SchedProbe``.

    ``max_threads`` and ``max_tgids`` bound the kernel maps; when one is full
    the probe counts the failed insert, and ``status.reason`` says so.
    """

    def __init__(
        self,
        max_threads: int = MAX_THREADS,
        max_tgids: int = MAX_TGIDS,
        proc_root: str = "/proc",
    ) -> None:
        self.max_threads = max_threads
        self.max_tgids = max_tgids
        self.proc_root = proc_root
        self._lock = threading.Lock()
        self._status = SourceStatus("sched", "bpf", False, "eBPF probe not started")
        self._handover: Handover | None = None
        self._maps: dict[str, BpfMap] = {}
        self._spawned: Spawned | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._epoch = 0
        self._last_ns: int | None = None
        self._prev_tid: dict[int, _Cum] = {}
        self._prev_tgid: dict[int, _Cum] = {}
        self._prev_hist: dict[int, tuple[int, ...]] = {}
        self._errors_seen = 0
        self._reads = 0
        self.attach_s: float | None = None
        # Why the probe is off, as fields (status.reason is worded for the status line).
        self.failure: Unavailable | None = None

    # ---- lifecycle ------------------------------------------------------------

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def attached(self) -> bool:
        return self._handover is not None

    def open(self) -> None:
        """Start compiling and attaching on a background thread; returns at once."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._status = SourceStatus("sched", "bpf", False, "compiling BPF program…")
            self._thread = threading.Thread(target=self._load, name="gputop-bpf-load", daemon=True)
            self._thread.start()

    def wait_attached(self, timeout_s: float) -> bool:
        """Block until the background load ends (attached or failed); True when attached."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)
        return self.attached

    def close(self) -> None:
        """Detach the probe; an in-flight compile is killed, so nothing stays attached."""
        with self._lock:
            self._closed = True
            t = self._thread
            if self._spawned is not None:
                self._spawned.cancel()
        if t is not None and t is not threading.current_thread():
            # The child is dead, so the loader returns at once and then sees _closed.
            t.join(timeout=30)
        with self._lock:
            ho, self._handover = self._handover, None
            self._maps = {}
        if ho is not None:
            ho.close()
            self._status = SourceStatus("sched", "bpf", False, "eBPF probe detached")

    def _fail(self, reason: str, fix: str | None) -> None:
        self.failure = Unavailable(reason, fix)
        # The frame's notes carry only the reason, so the fix goes into it as well.
        text = f"eBPF probe off: {reason}; scheduler numbers from /proc"
        if fix:
            text += f"; fix: {fix}"
        self._status = SourceStatus("sched", "bpf", False, text, fix)

    def compile_flags(self, masks: tuple[int, int]) -> list[str]:
        """The -D definitions bpf/sched_probe.c needs, for this kernel's prev_state masks."""
        return [
            f"-DMAX_THREADS={self.max_threads}",
            f"-DMAX_TGIDS={self.max_tgids}",
            f"-DHIST_SLOTS={HIST_SLOTS}",
            f"-DNOT_RUNNABLE_MASK={masks[0]:#x}",
            f"-DDEAD_MASK={masks[1]:#x}",
        ]

    def _load(self) -> None:
        started = time.monotonic()
        masks = preflight(self.proc_root)
        if isinstance(masks, Unavailable):
            self._fail(masks.reason, masks.fix)
            return
        cflags = self.compile_flags(masks)
        with self._lock:
            if self._closed:
                return
            try:
                sp = self._spawned = spawn(bpf_source_path(), cflags)
            except OSError as exc:
                self._fail(f"cannot start the compiler process: {exc}", None)
                return
        try:
            ho = receive(sp, timeout_s=120)
        except HandoverError as exc:
            if exc.unavailable:
                self._fail(exc.reason, INSTALL_FIX)
            else:
                self._fail(
                    f"BPF program failed to load: {exc.reason}",
                    "run `gputop doctor`: it checks bcc, kernel headers and tracefs",
                )
            return
        finally:
            with self._lock:
                self._spawned = None
        try:
            maps = ho.open_maps(MAP_TYPES)
        except (LayoutMismatch, BpfError) as exc:
            ho.close()
            self._fail(f"gputop does not match its BPF program: {exc}", "reinstall gputop")
            return
        with self._lock:
            if self._closed:
                ho.close()
                return
            self._handover = ho
            self._maps = maps
            self._last_ns = time.monotonic_ns()
            self.attach_s = time.monotonic() - started
            self._status = SourceStatus("sched", "bpf", True, None)

    def program_fds(self) -> dict[str, int]:
        """Name -> file descriptor of each attached BPF program (for bpf_stats in bench/)."""
        ho = self._handover
        return dict(ho.programs) if ho is not None else {}

    # ---- reading --------------------------------------------------------------

    def map_keys(self) -> tuple[set[int], set[int]]:
        """(tids, tgids) that have entries in the kernel maps now."""
        maps = self._maps
        if not maps:
            return set(), set()
        tids = {_as_int(k) for k in maps["threads"].keys()}
        tgids = {_as_int(k) for k in maps["groups"].keys()}
        return tids, tgids

    def read(self) -> ProbeReading | None:
        """Deltas since the previous read (the first one: since attach); None until attached."""
        maps = self._maps
        if not maps or self._last_ns is None:
            return None
        epoch_map = maps["epoch"]
        ended = self._epoch
        self._epoch = (ended + 1) & 0xFFFFFFFF
        epoch_map[epoch_map.Key(0)] = epoch_map.Leaf(self._epoch)
        now = time.monotonic_ns()
        dt_ns = max(1, now - self._last_ns)
        self._last_ns = now

        threads = maps["threads"].items()
        groups = maps["groups"].items()
        errors = sum(_as_int(v) for _, v in maps["errors"].items())

        per_tid: dict[int, TaskSched] = {}
        group_cum: dict[int, _Cum] = {}
        new_prev_tid: dict[int, _Cum] = {}
        for k, t in threads:
            tid = _as_int(k)
            runq, blocked, oncpu = int(t.runq_ns), int(t.blocked_ns), int(t.oncpu_ns)
            out_ts, wake_ts, in_ts = int(t.out_ts), int(t.wake_ts), int(t.in_ts)
            # Credit the stretch in progress up to now, split the way the probe will.
            if out_ts and now > out_ts:
                if t.runnable:
                    runq += now - out_ts
                elif out_ts < wake_ts < now:
                    blocked += wake_ts - out_ts
                    runq += now - wake_ts
                else:
                    blocked += now - out_ts
            elif in_ts and now > in_ts:
                oncpu += now - in_ts
            cur = _Cum(
                int(t.tgid), runq, blocked, oncpu, int(t.nivcsw), int(t.nvcsw), int(t.missed)
            )
            d, base = _delta(cur, self._prev_tid.get(tid))
            new_prev_tid[tid] = base
            per_tid[tid] = TaskSched(
                runq_ns=d.runq_ns,
                blocked_ns=d.blocked_ns,
                oncpu_ns=d.oncpu_ns,
                nivcsw=d.nivcsw,
                nvcsw=d.nvcsw,
                longest_offcpu_ns=_longest(t.longest_ns, t.longest_ep, ended),
                missed_switches=d.missed,
            )
            g = group_cum.get(cur.tgid)
            if g is None:
                group_cum[cur.tgid] = _Cum(cur.tgid, 0, 0, 0, 0, 0)
                group_cum[cur.tgid].add(cur)
            else:
                g.add(cur)
        self._prev_tid = new_prev_tid

        per_tgid: dict[int, TaskSched] = {}
        new_prev_tgid: dict[int, _Cum] = {}
        new_prev_hist: dict[int, tuple[int, ...]] = {}
        group_rows = {_as_int(k): g for k, g in groups}
        for tgid in set(group_cum) | set(group_rows):
            row = group_rows.get(tgid)
            cur = group_cum.get(tgid) or _Cum(tgid, 0, 0, 0, 0, 0)
            longest = 0
            hist_d: tuple[int, ...] | None = None
            if row is not None:
                cur.add(
                    _Cum(
                        tgid,
                        int(row.dead_runq_ns),
                        int(row.dead_blocked_ns),
                        int(row.dead_oncpu_ns),
                        int(row.dead_nivcsw),
                        int(row.dead_nvcsw),
                        int(row.dead_missed),
                    )
                )
                longest = _longest(row.longest_ns, row.longest_ep, ended)
                hist = tuple(int(x) for x in row.hist)
                ph = self._prev_hist.get(tgid)
                hist_d = (
                    hist
                    if ph is None
                    else tuple(max(0, a - b) for a, b in zip(hist, ph, strict=True))
                )
                new_prev_hist[tgid] = hist if ph is None else tuple(map(max, hist, ph))
            d, base = _delta(cur, self._prev_tgid.get(tgid))
            new_prev_tgid[tgid] = base
            per_tgid[tgid] = TaskSched(
                runq_ns=d.runq_ns,
                blocked_ns=d.blocked_ns,
                oncpu_ns=d.oncpu_ns,
                nivcsw=d.nivcsw,
                nvcsw=d.nvcsw,
                longest_offcpu_ns=longest,
                hist=hist_d,
                missed_switches=d.missed,
            )
        self._prev_tgid = new_prev_tgid
        self._prev_hist = new_prev_hist

        new_errors = max(0, errors - self._errors_seen)
        self._errors_seen = max(errors, self._errors_seen)
        if self._errors_seen:
            self._status = SourceStatus(
                "sched",
                "bpf",
                True,
                f"eBPF probe: {self._errors_seen} failed map updates ({self._error_detail(maps)});"
                " some threads are not tracked",
                f"raise the map bounds (max_threads={self.max_threads},"
                f" max_tgids={self.max_tgids}) in BpfSchedProbe",
            )
        self._reads += 1
        if self._reads % SWEEP_EVERY_READS == 0:
            self.sweep(group_cum.keys() | group_rows.keys(), per_tid.keys())
        return ProbeReading(dt_ns=dt_ns, per_tgid=per_tgid, per_tid=per_tid, map_errors=new_errors)

    def _error_detail(self, maps: dict[str, BpfMap]) -> str:
        parts = []
        for k, v in maps["errors"].items():
            n = _as_int(v)
            idx = _as_int(k)
            if n and idx < len(_ERROR_NAMES):
                parts.append(f"{_ERROR_NAMES[idx]}: {n}")
        return ", ".join(parts)

    def sweep(self, tgids: Iterable[int], tids: Iterable[int]) -> int:
        """Free entries of tasks that are gone but whose exit the probe missed.

        The probe frees entries itself at exit; this is the backstop for the
        narrow races around exit (see docs/ebpf.md). Returns how many it freed.
        """
        maps = self._maps
        if not maps:
            return 0
        freed = 0
        gone_groups = [g for g in tgids if not os.path.exists(f"{self.proc_root}/{g}")]
        table = maps["groups"]
        for g in gone_groups:
            try:
                del table[table.Key(g)]
                freed += 1
            except KeyError:
                pass
        table = maps["threads"]
        for tid in tids:
            tgid = self._prev_tid[tid].tgid if tid in self._prev_tid else tid
            if not os.path.exists(f"{self.proc_root}/{tgid}/task/{tid}"):
                try:
                    del table[table.Key(tid)]
                    freed += 1
                except KeyError:
                    pass
        return freed
