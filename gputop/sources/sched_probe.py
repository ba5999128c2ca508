"""The eBPF scheduler probe: ``sched:sched_switch`` aggregated in kernel maps.

Two loaders, chosen by ``plan_loader()``. Where the kernel has BTF, ``open()``
loads the CO-RE object built ahead of time (``bpf/sched_probe.bpf.o``) with
libbpf and attaches it in tens of milliseconds, before it returns
(``libbpf_loader``): no compiler, no kernel headers, no bcc. Elsewhere (or if
libbpf refuses the object) a background thread has a short-lived child process
compile ``bpf/sched_probe.c`` with bcc and attach it (``bpf_handover``); this
process never imports bcc or LLVM. Either way the programs, attachments and
maps are file descriptors of this process, and the maps are read with
``bpf(2)`` through the ctypes structures of ``probe_abi``. Until the probe is
attached ``read()`` returns None and the sampler serves the /proc numbers, with
``status.reason`` saying what is happening or why the probe cannot run, and the
fix.

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
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from gputop.model.frame import SourceStatus
from gputop.model.probe_abi import (
    ACT_EXEC,
    DEFAULT_MAX_PIPELINE,
    DEFAULT_MAX_PREEMPT,
    DEFAULT_MAX_TGIDS,
    DEFAULT_MAX_THREADS,
    ERR_ACTIVITY_FULL,
    ERROR_NAMES,
    HIST_SLOTS,
    WAKE_INPUT,
    WAKE_IRQ,
    WAKE_NONE,
    WAKE_OTHER,
    WAKE_THREAD,
    GroupT,
    IrqDepthT,
    PreemptKeyT,
    PreemptValT,
    ProbeConfig,
    ThreadT,
    WaitersT,
    WokeKeyT,
    WokeValT,
)
from gputop.model.readings import Pipeline, ProbeReading
from gputop.model.sched_intervals import MapRows, SchedIntervals
from gputop.sources import libbpf_loader
from gputop.sources.bcc_loader import INSTALL_FIX, bcc_present
from gputop.sources.bpf_build import OBJECT_NAME
from gputop.sources.bpf_handover import Handover, HandoverError, Spawned, receive, spawn
from gputop.sources.bpf_syscall import BpfError, BpfMap, LayoutMismatch
from gputop.sources.cuda_probe import ENTER_PROGRAM, EXIT_PROGRAM, CudaProbes
from gputop.sources.libbpf_loader import LibbpfError, TracepointAttach

__all__ = [
    "HIST_SLOTS",
    "MAP_TYPES",
    "WAKE_INPUT",
    "WAKE_IRQ",
    "WAKE_NONE",
    "WAKE_OTHER",
    "WAKE_THREAD",
    "BpfSchedProbe",
    "GroupT",
    "LoaderPlan",
    "ThreadT",
    "Unavailable",
    "plan_loader",
    "preflight",
]

MAX_THREADS = DEFAULT_MAX_THREADS
MAX_TGIDS = DEFAULT_MAX_TGIDS
# Where bcc looks for a tracepoint's layout, in its own order.
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
SWEEP_EVERY_READS = 10
# The kernel's own headers (CONFIG_IKHEADERS), bcc's fallback.
KHEADERS = "/sys/kernel/kheaders.tar.xz"

_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38
_CAP_BPF = 39

# Bounds of the pipeline/watched maps (workers and pin threads of every trainer)
# and of the (victim, preemptor) map.
MAX_PIPELINE = DEFAULT_MAX_PIPELINE
MAX_PREEMPT = DEFAULT_MAX_PREEMPT
# Which loader to use: unset (the best this node allows), "libbpf" or "bcc".
LOADER_ENV = "GPUTOP_BPF_LOADER"
# What the probe asks of the kernel and what it does to other tracers (`gputop doctor`).
FOOTPRINT = (
    "eBPF probe footprint: raw tracepoints as BPF links (bcc: perf-event tracepoints) on"
    " sched:sched_switch, sched_waking, sched_wakeup, sched_process_exit, sched_process_exec;"
    " entry/exit of irq, softirq, timer and x86 irq_vectors to tell interrupt context; and"
    " uprobes on the CUDA driver's synchronizing calls in the libcuda a watched trainer maps"
    " (never on kernel launches); no kprobes. Other tracers (perf, bcc tools, another gputop)"
    " keep seeing every event: a raw tracepoint filters nothing, and each perf-event program"
    " returns 1, which keeps the event."
)
# The status reason for the one tick between attaching and the first full
# eBPF interval (it lands in that frame's sources.notes).
ATTACHED_NOTE = "eBPF probe attached; its numbers start with the next full interval"
# Nice value of the thread that compiles the program: the lowest CPU priority.
COMPILE_NICE = 19
# Interrupt entry/exit tracepoint pairs ({category}:{event}_entry/_exit) that
# keep the per-CPU interrupt depth; each one this kernel has is attached.
# irq_vectors:irq_work_* is left out: x86 refuses sampling perf events on it
# (TRACE_EVENT_PERF_PERM), and the attempt prints an error from libbcc.
IRQ_EVENT_PAIRS = (
    ("irq", "irq_handler"),
    ("irq", "softirq"),
    ("timer", "hrtimer_expire"),
    ("timer", "timer_expire"),
    ("irq_vectors", "local_timer"),
    ("irq_vectors", "call_function"),
    ("irq_vectors", "call_function_single"),
    ("irq_vectors", "reschedule"),
    ("irq_vectors", "x86_platform_ipi"),
    ("irq_vectors", "thermal_apic"),
    ("irq_vectors", "error_apic"),
    ("irq_vectors", "spurious_apic"),
    ("ipi", "ipi"),
)


# Every map of the program: name -> (key type, value type), None for a map only
# the kernel side uses.
MAP_TYPES: dict[str, tuple[Any, Any] | None] = {
    "threads": (ctypes.c_uint32, ThreadT),
    "groups": (ctypes.c_uint32, GroupT),
    "exiting": None,
    "epoch": (ctypes.c_int32, ctypes.c_uint32),
    "errors": (ctypes.c_int32, ctypes.c_uint64),
    "pipeline": (ctypes.c_uint32, ctypes.c_uint32),
    "watched": (ctypes.c_uint32, ctypes.c_uint8),
    "preempt": (PreemptKeyT, PreemptValT),
    "activity": (ctypes.c_uint32, ctypes.c_uint8),
    "running": (ctypes.c_int32, ctypes.c_uint32),
    "other_wakers": (WokeKeyT, WokeValT),
    "cpu_waiters": (ctypes.c_int32, WaitersT),
    "irq_depth": (ctypes.c_int32, IrqDepthT),
}


def possible_cpus() -> int:
    """How many CPU ids this kernel can use (the highest possible CPU + 1)."""
    text = _read_text("/sys/devices/system/cpu/possible")
    if text:
        try:
            return int(re.split(r"[-,]", text.strip())[-1]) + 1
        except ValueError:
            pass
    return os.cpu_count() or 1


def _bpf_file(name: str) -> str:
    """A file of ``bpf/``: inside the installed package, else the source tree's."""
    installed = resources.files("gputop") / "bpf" / name
    if installed.is_file():
        return str(installed)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "bpf", name))


def bpf_source_path() -> str:
    """The BPF C program (bcc compiles it at run time)."""
    return _bpf_file("sched_probe.c")


def bpf_object_path() -> str:
    """The CO-RE object built ahead of time from it (libbpf loads it)."""
    return _bpf_file(OBJECT_NAME)


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


@dataclass(frozen=True, slots=True)
class KernelFacts:
    """What the probe takes from this kernel's tracefs before loading."""

    masks: tuple[int, int]  # sched_switch prev_state: (not runnable, exiting)
    group_dead: bool  # sched_process_exit has a group_dead field (Linux 6.16+)


def _tracefs_format(category: str, event: str) -> str | None:
    for d in TRACEFS_DIRS:
        fmt = _read_text(f"{d}/events/{category}/{event}/format")
        if fmt is not None:
            return fmt
    return None


def kernel_facts(proc_root: str = "/proc") -> KernelFacts | Unavailable:
    """Privileges and tracefs, which both loaders need, and what the probe reads there."""
    status_text = _read_text(f"{proc_root}/self/status") or ""
    if not has_bpf_capabilities(status_text):
        return Unavailable(
            "needs root (or CAP_BPF + CAP_PERFMON)",
            "run gputop with sudo (or give it CAP_BPF, CAP_PERFMON and read access to tracefs)",
        )
    fmt = _tracefs_format("sched", "sched_switch")
    if fmt is None:
        return Unavailable(
            "tracefs is not mounted (no sched_switch format)",
            "mount -t tracefs nodev /sys/kernel/tracing",
        )
    masks = state_masks(fmt)
    if masks is None:
        return Unavailable("cannot read prev_state flags from sched_switch's format", None)
    exit_fmt = _tracefs_format("sched", "sched_process_exit") or ""
    return KernelFacts(masks, re.search(r"\bgroup_dead;", exit_fmt) is not None)


@dataclass(frozen=True, slots=True)
class LoaderPlan:
    """Which loader the probe uses here, why, and what the node lacks for the other one.

    ``bcc_fallback``: bcc can take over if libbpf refuses the object.
    """

    loader: str  # "libbpf" | "bcc"
    why: str
    other: str
    bcc_fallback: bool = False


def libbpf_problem(object_path: str | None = None) -> Unavailable | None:
    """Why the ahead-of-time object cannot be loaded here (None: it can)."""
    why = libbpf_loader.kernel_btf_problem()
    if why is not None:
        return Unavailable(why, "use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    _, why = libbpf_loader.find_libbpf()
    if why is not None:
        return Unavailable(why, libbpf_loader.libbpf_fix())
    path = object_path or bpf_object_path()
    if not os.path.isfile(path):
        return Unavailable(f"this gputop has no probe object ({path})", "reinstall gputop")
    return None


def bcc_problem(release: str | None = None) -> Unavailable | None:
    """Why bcc cannot compile the probe here (None: it may; the child has the last word).

    Checked without importing bcc: only the compiler child ever does.
    """
    if not bcc_present():
        return Unavailable("bcc (BPF Compiler Collection) is not installed", INSTALL_FIX)
    release = release or os.uname().release
    if not kernel_headers_present(release):
        return Unavailable(
            f"no kernel headers for {release}",
            f"apt-get install linux-headers-{release} (or set BCC_KERNEL_SOURCE)",
        )
    return None


def plan_loader(forced: str | None = None) -> LoaderPlan | Unavailable:
    """The loader for this node: libbpf where the kernel has BTF, else bcc; or why neither.

    ``forced`` ("libbpf" or "bcc"; default ``$GPUTOP_BPF_LOADER``) allows only that one.
    """
    forced = forced if forced is not None else os.environ.get(LOADER_ENV, "")
    core = libbpf_problem()
    bcc = bcc_problem()
    if forced not in ("", "libbpf", "bcc"):
        return Unavailable(f"{LOADER_ENV}={forced} names no loader", "use libbpf or bcc")
    if forced == "bcc" or (forced == "" and core is not None):
        if bcc is not None:
            if forced:
                return bcc
            return Unavailable(
                f"{core.reason if core else ''}, and {bcc.reason}",
                f"{core.fix if core else ''}; or for bcc: {bcc.fix}",
            )
        why = f"{LOADER_ENV}=bcc" if forced else f"{core.reason if core else ''}"
        other = core.reason if core else "libbpf could load the object built ahead of time"
        return LoaderPlan("bcc", f"{why}: compiled at run time by bcc", other)
    if core is not None:
        return core
    version = libbpf_loader.libbpf_version() or "?"
    why = f"the kernel has BTF: the object built ahead of time, loaded by libbpf {version}"
    other = "bcc fallback ready" if bcc is None else f"bcc fallback unavailable: {bcc.reason}"
    return LoaderPlan("libbpf", why, other, bcc_fallback=bcc is None and forced == "")


def preflight(proc_root: str = "/proc") -> tuple[int, int] | Unavailable:
    """Everything the probe needs before loading, checked in order.

    Returns the prev_state masks or why not. Cheap and side-effect free (it
    never imports bcc), so ``gputop doctor`` can call it too.
    """
    facts = kernel_facts(proc_root)
    if isinstance(facts, Unavailable):
        return facts
    plan = plan_loader()
    if isinstance(plan, Unavailable):
        return plan
    return facts.masks


def _as_int(v: Any) -> int:
    """A map key or counter as an int (batch reads give ints, plain reads ctypes scalars)."""
    return v if isinstance(v, int) else int(v.value)


class BpfSchedProbe:
    """Scheduler probe on ``sched:sched_switch`` (libbpf, or bcc in a child); a ``SchedProbe``.

    ``max_threads`` and ``max_tgids`` bound the kernel maps; when one is full
    the probe counts the failed insert, and ``status.reason`` says so.
    ``compile_nice`` is the nice value of the bcc compiler child (19: the
    compile only gets CPU the watched job leaves over). ``use_loader``
    ("libbpf" or "bcc") allows only that loader (default: ``$GPUTOP_BPF_LOADER``,
    else the best this node has). ``loader`` is the one that attached it,
    ``plan`` why that one.
    """

    def __init__(
        self,
        max_threads: int = MAX_THREADS,
        max_tgids: int = MAX_TGIDS,
        proc_root: str = "/proc",
        compile_nice: int = COMPILE_NICE,
        use_loader: str | None = None,
    ) -> None:
        self.max_threads = max_threads
        self.max_tgids = max_tgids
        self.proc_root = proc_root
        self.compile_nice = compile_nice
        self.use_loader = use_loader
        self._lock = threading.Lock()
        self._status = SourceStatus("sched", "bpf", False, "eBPF probe not started")
        self._handover: Handover | None = None
        self._maps: dict[str, BpfMap] = {}
        self._spawned: Spawned | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._epoch = 0
        self._last_ns: int | None = None
        self._primed = False
        self._intervals = SchedIntervals()
        # The threads whose rows to read (the pipeline's); None: all of them.
        self._want_tids: frozenset[int] | None = None
        self._activity_errors = 0
        # The CUDA synchronization uprobes, once attached (see cuda_probe.py).
        self.cuda: CudaProbes | None = None
        # What user space asked for, and what is in the kernel maps.
        self._want_feeds: dict[int, int] = {}
        self._want_watched: set[int] = set()
        self._feeds: dict[int, int] = {}
        self._watched: set[int] = set()
        self._errors_seen = 0
        self._reads = 0
        self.attach_s: float | None = None
        self.irq_tracepoints: tuple[str, ...] = ()
        # Why the probe is off, as fields (status.reason is worded for the status line).
        self.failure: Unavailable | None = None
        self._opened = False
        self.plan: LoaderPlan | None = None
        self.loader: str | None = None
        # Why libbpf's attempt gave way to bcc, when it did.
        self.libbpf_failure: str | None = None

    # ---- lifecycle ------------------------------------------------------------

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def attached(self) -> bool:
        return self._handover is not None

    def open(self) -> None:
        """Load and attach: with libbpf before returning, with bcc on a background thread.

        libbpf takes tens of milliseconds, so the sampler's first tick already
        has the probe; bcc compiles for seconds, during which ``read()``
        returns None and the sampler serves /proc's numbers.
        """
        with self._lock:
            if self._opened or self._closed:
                return
            self._opened = True
        started = time.monotonic()
        facts = kernel_facts(self.proc_root)
        if isinstance(facts, Unavailable):
            self._fail(facts.reason, facts.fix)
            return
        plan = plan_loader(self.use_loader)
        if isinstance(plan, Unavailable):
            self._fail(plan.reason, plan.fix)
            return
        self.plan = plan
        if plan.loader == "libbpf":
            self._status = SourceStatus("sched", "bpf", False, "loading the BPF program…")
            try:
                ho = self._load_libbpf(facts)
            except LibbpfError as exc:
                if not plan.bcc_fallback:
                    self._fail(
                        f"libbpf could not load the probe: {exc.reason}",
                        "run `gputop doctor`: it checks libbpf, kernel BTF and tracefs",
                    )
                    return
                self.libbpf_failure = exc.reason
            else:
                self._take(ho, "libbpf", started)
                return
        with self._lock:
            if self._closed:
                return
            self._status = SourceStatus("sched", "bpf", False, "compiling BPF program…")
            self._thread = threading.Thread(
                target=self._load_bcc, args=(facts, started), name="gputop-bpf-load", daemon=True
            )
            self._thread.start()

    def max_entries(self) -> dict[str, int]:
        """Every map's bound on this node."""
        cpus = possible_cpus()
        return {
            "threads": self.max_threads,
            "exiting": self.max_threads,
            "groups": self.max_tgids,
            "pipeline": MAX_PIPELINE,
            "watched": MAX_PIPELINE,
            "preempt": MAX_PREEMPT,
            "other_wakers": MAX_PREEMPT,
            "cpu_waiters": cpus,
            "irq_depth": cpus,
            "activity": self.max_tgids,
            "running": cpus,
        }

    def _load_libbpf(self, facts: KernelFacts) -> Handover:
        config = ProbeConfig(max_cpus=possible_cpus())
        events = (
            "sched_switch",
            "sched_waking",
            "sched_wakeup",
            "sched_process_exit",
            "sched_process_exec",
        )
        return libbpf_loader.load(
            Path(bpf_object_path()),
            config,
            self.max_entries(),
            [TracepointAttach(f"tracepoint__sched__{e}", f"sched:{e}") for e in events],
            [
                (
                    TracepointAttach("on_irq_entry", f"{c}:{e}_entry"),
                    TracepointAttach("on_irq_exit", f"{c}:{e}_exit"),
                )
                for c, e in self._irq_pairs()
            ],
        )

    def wait_attached(self, timeout_s: float) -> bool:
        """Block until loading ends (attached or failed); True when attached."""
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

    def compile_flags(self, facts: KernelFacts) -> list[str]:
        """bcc's -D definitions and include path for bpf/sched_probe.c on this kernel."""
        return [
            f"-DMAX_THREADS={self.max_threads}",
            f"-DMAX_TGIDS={self.max_tgids}",
            f"-DMAX_PIPELINE={MAX_PIPELINE}",
            f"-DMAX_PREEMPT={MAX_PREEMPT}",
            f"-DMAX_CPUS={possible_cpus()}",
            f"-DNOT_RUNNABLE_MASK={facts.masks[0]:#x}",
            f"-DDEAD_MASK={facts.masks[1]:#x}",
            f"-DHAVE_GROUP_DEAD={int(facts.group_dead)}",
            f"-I{os.path.dirname(bpf_source_path())}",
        ]

    def _load_bcc(self, facts: KernelFacts, started: float) -> None:
        cflags = self.compile_flags(facts)
        with self._lock:
            if self._closed:
                return
            try:
                sp = self._spawned = spawn(
                    bpf_source_path(),
                    cflags,
                    nice=self.compile_nice,
                    attach_pairs=[
                        (f"{c}:{e}_entry", "on_irq_entry", f"{c}:{e}_exit", "on_irq_exit")
                        for c, e in self._irq_pairs()
                    ],
                    load_only=(ENTER_PROGRAM, EXIT_PROGRAM),
                )
            except OSError as exc:
                self._fail(f"cannot start the compiler process: {exc}", None)
                return
        try:
            ho = receive(sp, timeout_s=120)
        except HandoverError as exc:
            if exc.unavailable:
                self._fail(exc.reason, INSTALL_FIX)
            else:
                reason = f"BPF program failed to load: {exc.reason}"
                if self.libbpf_failure:
                    reason += f" (and libbpf: {self.libbpf_failure})"
                self._fail(reason, "run `gputop doctor`: it checks bcc, kernel headers and tracefs")
            return
        finally:
            with self._lock:
                self._spawned = None
        self._take(ho, "bcc", started)

    def _take(self, ho: Handover, loader: str, started: float) -> None:
        """Adopt an attached program: check the maps against gputop's structures, start reading."""
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
            self.cuda = CudaProbes(ho.programs, ho.attachments, self.proc_root)
            self.loader = loader
            self.irq_tracepoints = tuple(
                event.removesuffix("_entry")
                for a in ho.attachments
                if a.endswith("_entry")
                and (event := a.split(":", 1)[1]) is not None
                and a.split(":", 1)[0] in ("tracepoint", "raw_tracepoint")
                and not event.startswith("sched:")
            )
            self._last_ns = time.monotonic_ns()
            self.attach_s = time.monotonic() - started
            self._status = SourceStatus("sched", "bpf", True, None)

    def _irq_pairs(self) -> list[tuple[str, str]]:
        """The interrupt entry/exit tracepoint pairs this kernel has (IRQ_EVENT_PAIRS)."""
        tracefs = next((d for d in TRACEFS_DIRS if os.path.isdir(f"{d}/events")), None)
        if tracefs is None:
            return []
        return [
            (c, e)
            for c, e in IRQ_EVENT_PAIRS
            if os.path.isdir(f"{tracefs}/events/{c}/{e}_entry")
            and os.path.isdir(f"{tracefs}/events/{c}/{e}_exit")
        ]

    def program_fds(self) -> dict[str, int]:
        """Name -> file descriptor of each attached BPF program (for bpf_stats in bench/)."""
        ho = self._handover
        return dict(ho.programs) if ho is not None else {}

    # ---- the input pipeline ---------------------------------------------------

    def _sync_pipeline(self, maps: dict[str, BpfMap]) -> None:
        """Write only what changed since the last sync into the pipeline and watched maps."""
        table = maps["pipeline"]
        for k in [k for k in self._feeds if k not in self._want_feeds]:
            with suppress(KeyError):
                del table[table.Key(k)]
            del self._feeds[k]
        for k, v in self._want_feeds.items():
            if self._feeds.get(k) != v:
                table[table.Key(k)] = table.Leaf(v)
                self._feeds[k] = v
        table = maps["watched"]
        for k in self._watched - self._want_watched:
            with suppress(KeyError):
                del table[table.Key(k)]
        for k in self._want_watched - self._watched:
            table[table.Key(k)] = table.Leaf(1)
        self._watched = set(self._want_watched)

    # ---- reading --------------------------------------------------------------

    def map_keys(self) -> tuple[set[int], set[int]]:
        """(tids, tgids) that have entries in the kernel maps now."""
        maps = self._maps
        if not maps:
            return set(), set()
        tids = {_as_int(k) for k in maps["threads"].keys()}
        tgids = {_as_int(k) for k in maps["groups"].keys()}
        return tids, tgids

    def read(self, pipeline: Pipeline | None = None) -> ProbeReading | None:
        """Deltas since the previous read; None until attached and for the first read.

        ``pipeline``: who feeds which trainer and whose preemptors to record,
        as the join stage saw them at the end of the last tick (None: as
        before). The kernel maps get it after this read's rows are taken, so it
        classifies wake-ups from now on; processes that stopped being watched
        lose their rows now.

        The first read after attaching only takes the baselines: its window
        would start at the attach, part-way through an interval, before the
        probe had seen any thread switch. A thread or process seen for the
        first time is likewise left out of that read (its window is partial);
        the sampler keeps /proc's numbers for it.
        """
        if pipeline is not None:
            self._want_feeds = dict(pipeline.feeds)
            self._want_watched = set(pipeline.watched)
            self._want_tids = pipeline.tids
        maps = self._maps
        if not maps or self._last_ns is None:
            return None
        ended, now, dt_ns = self._flip_epoch(maps)
        watched_before = self._watched & self._want_watched
        # Probed through the whole interval: a library attached at this read counts next time.
        cuda_before = self.cuda.probed() if self.cuda is not None else frozenset()
        active, execd = self._activity(maps)
        threads, groups = self._rows(maps)
        rows = MapRows(
            now_ns=now,
            dt_ns=dt_ns,
            ended_epoch=ended,
            threads=threads,
            groups=groups,
            preempt=self._watched_rows(maps["preempt"], lambda k, v: (int(k.victim), int(k.by))),
            woke=self._watched_rows(maps["other_wakers"], lambda k, v: (int(k.tid), int(k.waker))),
        )
        reading = self._intervals.update(rows, watched_before)
        tgid_of = self._intervals.tgid_of()
        self._free_stale_waiters(maps, tgid_of.keys())
        new_errors = self._check_errors(maps)
        self._sync_pipeline(maps)
        if self.cuda is not None:
            self.cuda.update(self._want_watched - set(self._want_feeds))
        self._reads += 1
        if self._reads % SWEEP_EVERY_READS == 0:
            self.sweep(self._intervals.tgids(), tgid_of)
        if not self._primed:
            self._primed = True
            if not self._errors_seen:
                self._status = SourceStatus("sched", "bpf", True, ATTACHED_NOTE)
            return None
        if self._status.reason == ATTACHED_NOTE:
            self._status = SourceStatus("sched", "bpf", True, None)
        return replace(
            reading,
            map_errors=new_errors,
            cuda_tgids=cuda_before & watched_before,
            active=active,
            execd=execd,
        )

    def _rows(self, maps: dict[str, BpfMap]) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
        """The thread and process rows to account: those of the rows shown, or all of them."""
        tmap, gmap = maps["threads"], maps["groups"]
        if self._want_tids is None:
            return (
                [(_as_int(k), t) for k, t in tmap.items()],
                [(_as_int(k), g) for k, g in gmap.items()],
            )
        threads = [(tid, t) for tid in self._want_tids if (t := tmap.get(tid)) is not None]
        tgids = {int(t.tgid) for _, t in threads}
        groups = [(g, row) for g in tgids if (row := gmap.get(g)) is not None]
        return threads, groups

    def _activity(self, maps: dict[str, BpfMap]) -> tuple[frozenset[int] | None, frozenset[int]]:
        """(processes that ran, exited or exec'd since the last read or run now, those that
        exec'd); the first is None when the activity map overflowed (read everything)."""
        marks = {_as_int(k): _as_int(v) for k, v in maps["activity"].pop_all()}
        execd = frozenset(t for t, f in marks.items() if f & ACT_EXEC)
        running = set()
        tmap = maps["threads"]
        for _, tid in maps["running"].items():
            tid = _as_int(tid)
            if tid:
                t = tmap.get(tid)
                running.add(int(t.tgid) if t is not None and t.tgid else tid)
        overflowed = _as_int(maps["errors"].get(ERR_ACTIVITY_FULL) or 0)
        lost = overflowed > self._activity_errors
        self._activity_errors = overflowed
        return (None if lost else frozenset(marks) | running), execd

    def _watched_rows(
        self, table: BpfMap, key_of: Callable[[Any, Any], tuple[int, int]]
    ) -> dict[tuple[int, int], Any]:
        """A (watched process, other) -> value map's rows; frees the rows of unwatched ones.

        Values: (ns, count) for ``preempt``, ns for ``other_wakers`` (whose rows
        carry the watched thread's tgid).
        """
        out: dict[tuple[int, int], Any] = {}
        stale = []
        for k, v in table.items():
            key = key_of(k, v)
            victim = int(v.tgid) if hasattr(v, "tgid") else key[0]
            if victim not in self._want_watched:
                stale.append(k)
                continue
            out[key] = (int(v.ns), int(v.count)) if hasattr(v, "count") else int(v.ns)
        for k in stale:
            with suppress(KeyError):
                del table[k]
        return out

    def _flip_epoch(self, maps: dict[str, BpfMap]) -> tuple[int, int, int]:
        """Start the next epoch; (the epoch that ended, now in ns, the interval in ns)."""
        epoch_map = maps["epoch"]
        ended = self._epoch
        self._epoch = (ended + 1) & 0xFFFFFFFF
        epoch_map[epoch_map.Key(0)] = epoch_map.Leaf(self._epoch)
        now = time.monotonic_ns()
        assert self._last_ns is not None
        dt_ns = max(1, now - self._last_ns)
        self._last_ns = now
        return ended, now, dt_ns

    def _free_stale_waiters(self, maps: dict[str, BpfMap], live_tids: Collection[int]) -> None:
        """Free run-queue waiter slots of threads that are gone or no longer watched.

        The kernel frees a slot when its thread gets a CPU; a thread whose entry
        the sweep removed, or whose process is no longer watched, could keep one.
        """
        table = maps["cpu_waiters"]
        for k, w in table.items():
            stale = [
                i
                for i, tid in enumerate(w.tid)
                if tid and (tid not in live_tids or w.tgid[i] not in self._want_watched)
            ]
            if stale:
                for i in stale:
                    w.tid[i] = 0
                table[k] = w

    def _check_errors(self, maps: dict[str, BpfMap]) -> int:
        """New failed map updates since the last read; a standing reason in the status."""
        errors = sum(_as_int(v) for _, v in maps["errors"].items())
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
        return new_errors

    def _error_detail(self, maps: dict[str, BpfMap]) -> str:
        parts = []
        for k, v in maps["errors"].items():
            n = _as_int(v)
            idx = _as_int(k)
            if n and idx < len(ERROR_NAMES):
                parts.append(f"{ERROR_NAMES[idx]}: {n}")
        return ", ".join(parts)

    def sweep(self, tgids: Iterable[int], tgid_of: Mapping[int, int]) -> int:
        """Free entries of tasks that are gone but whose exit the probe missed.

        The probe frees entries itself at exit; this is the backstop for the
        narrow races around exit (see docs/ebpf.md). ``tgid_of``: thread ->
        its process. Returns how many it freed.
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
        for tid, tgid in tgid_of.items():
            if not os.path.exists(f"{self.proc_root}/{tgid}/task/{tid}"):
                try:
                    del table[table.Key(tid)]
                    freed += 1
                except KeyError:
                    pass
        return freed
