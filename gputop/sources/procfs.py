"""Host and per-process scheduling signals from /proc (no root needed).

Two passes per tick keep the cost linear and small: every process gets one read
of ``/proc/PID/stat`` (CPU time, parent, name); only the processes that will be
shown (GPU holders, trainers, DataLoader workers, top CPU consumers) get the
per-thread reads (``task/*/schedstat`` and ``task/*/status``) that give run-queue
wait, off-CPU share and context switches. Processes are keyed by (pid, start
time) so a reused PID never inherits another process's counters.
"""

from __future__ import annotations

import heapq
import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gputop.model.frame import (
    HostSample,
    Preemptor,
    ProcessSample,
    Role,
    SourceStatus,
    ThreadSample,
)
from gputop.model.readings import ProbeReading, TaskSched
from gputop.model.roles import assign_roles, thread_role_from_comm
from gputop.sources.base import GpuUse
from gputop.sources.cpulimits import NOT_READ, job_cpu_limits

_PF_KTHREAD = 0x00200000
# How long a trainer keeps its role with no DataLoader workers (see _keep_trainers).
TRAINER_GRACE_S = 10.0
_CMDLINE_MAX = 4096


def _read(path: str) -> bytes | None:
    """Whole small file, or None when it is gone or unreadable (races are normal)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Stat:
    pid: int
    comm: str
    state: str
    ppid: int
    ticks: int
    nthreads: int
    start: int
    kthread: bool


def parse_stat(raw: bytes) -> _Stat | None:
    """Parse /proc/PID/stat; None when truncated or malformed."""
    try:
        lp = raw.index(b"(")
        rp = raw.rindex(b")")
        rest = raw[rp + 2 :].split()
        if len(rest) < 20:
            return None
        return _Stat(
            pid=int(raw[:lp]),
            comm=raw[lp + 1 : rp].decode("utf-8", "replace"),
            state=rest[0].decode("ascii", "replace"),
            ppid=int(rest[1]),
            ticks=int(rest[11]) + int(rest[12]),
            nthreads=int(rest[17]),
            start=int(rest[19]),
            kthread=bool(int(rest[6]) & _PF_KTHREAD),
        )
    except ValueError:
        return None


def parse_schedstat(raw: bytes | None) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) from a schedstat file."""
    if not raw:
        return None
    parts = raw.split()
    if len(parts) < 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def parse_status_ctxt(raw: bytes | None) -> tuple[str, int, int] | None:
    """(thread name, voluntary, involuntary switches) from a status file."""
    if not raw:
        return None
    try:
        name = ""
        if raw.startswith(b"Name:"):
            name = raw[5 : raw.index(b"\n")].strip().decode("utf-8", "replace")
        v = raw.index(b"\nvoluntary_ctxt_switches:") + 25
        n = raw.index(b"\nnonvoluntary_ctxt_switches:", v) + 28
        vol = int(raw[v : raw.index(b"\n", v)])
        end = raw.find(b"\n", n)
        invol = int(raw[n:] if end < 0 else raw[n:end])
        return name, vol, invol
    except ValueError:
        return None


@dataclass(slots=True)
class _ThreadPrev:
    oncpu: int
    run_delay: int
    vol: int
    invol: int


@dataclass(slots=True)
class _ProcPrev:
    ticks: int
    threads: dict[int, _ThreadPrev] = field(default_factory=dict)
    preempt_total: int = 0
    vcsw_total: int = 0
    detailed: bool = False
    user: str | None = None
    # Main thread's "other process" wake-ups found to be its workers', ns so far.
    moved_to_input_ns: int = 0


@dataclass(frozen=True, slots=True)
class HostReading:
    """What ProcSource returns: the host and the processes worth showing."""

    host: HostSample
    processes: tuple[ProcessSample, ...]
    all_count: int


class ProcSource:
    """Reads /proc. Construct with another root to read a fake tree in tests."""

    def __init__(self, proc_root: str = "/proc", top_n: int = 30) -> None:
        self.root = proc_root.rstrip("/")
        self.top_n = top_n
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self._prev: dict[tuple[int, int], _ProcPrev] = {}
        self._cmdlines: dict[tuple[int, int], str] = {}
        self._users: dict[int, str] = {}
        self._trainers: dict[tuple[int, int], float] = {}
        self._cpu_prev: list[tuple[int, int]] | None = None
        self._last_t: float | None = None
        self._has_schedstat = os.path.exists(self.root + "/self/schedstat") or os.path.exists(
            self.root + "/1/schedstat"
        )
        self._status = SourceStatus("sched", "procfs", True, None)

    @property
    def status(self) -> SourceStatus:
        return self._status

    # ---- host -------------------------------------------------------------

    def read_host(self) -> HostSample:
        """System CPU, load, memory and CPU pressure."""
        cpus: list[tuple[int, int]] = []
        online: list[int] = []  # /proc/stat lists the online CPUs only
        procs_running = 0
        raw = _read(self.root + "/stat") or b""
        for line in raw.split(b"\n"):
            if line.startswith(b"cpu"):
                parts = line.split()
                if parts[0] != b"cpu":
                    online.append(int(parts[0][3:]))
                vals = [int(x) for x in parts[1:9]]
                idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
                cpus.append((sum(vals), idle))
            elif line.startswith(b"procs_running"):
                procs_running = int(line.split()[1])
        per_cpu: list[float] = []
        total_pct = 0.0
        if self._cpu_prev is not None and len(self._cpu_prev) == len(cpus):
            pcts = []
            for (tot, idle), (ptot, pidle) in zip(cpus, self._cpu_prev, strict=True):
                dt = tot - ptot
                pcts.append(0.0 if dt <= 0 else 100.0 * (dt - (idle - pidle)) / dt)
            total_pct, per_cpu = pcts[0], pcts[1:]
        self._cpu_prev = cpus
        ncpu = max(1, len(cpus) - 1)
        load = (_read(self.root + "/loadavg") or b"0 0 0").split()
        mem_total = mem_avail = 0
        for line in (_read(self.root + "/meminfo") or b"").split(b"\n"):
            if line.startswith(b"MemTotal:"):
                mem_total = int(line.split()[1]) // 1024
            elif line.startswith(b"MemAvailable:"):
                mem_avail = int(line.split()[1]) // 1024
        some = full = None
        psi = _read(self.root + "/pressure/cpu")
        if psi:
            for line in psi.split(b"\n"):
                if line.startswith((b"some", b"full")):
                    avg10 = float(line.split()[1].split(b"=")[1])
                    if line.startswith(b"some"):
                        some = avg10
                    else:
                        full = avg10
        return HostSample(
            cpu_pct=round(total_pct, 1),
            ncpu=ncpu,
            load1=float(load[0]),
            load5=float(load[1]),
            load15=float(load[2]),
            psi_cpu_some=some,
            psi_cpu_full=full,
            per_cpu_pct=tuple(round(p, 1) for p in per_cpu),
            mem_used_mib=mem_total - mem_avail,
            mem_total_mib=mem_total,
            procs_running=procs_running,
            cpus_online=tuple(online),
        )

    # ---- processes --------------------------------------------------------

    def cmdline(self, pid: int, start: int = 0) -> str:
        """The command line (NUL-separated args joined by spaces), cached per process."""
        key = (pid, start)
        got = self._cmdlines.get(key)
        if got is None:
            raw = _read(f"{self.root}/{pid}/cmdline")
            got = (
                raw[:_CMDLINE_MAX].replace(b"\0", b" ").strip().decode("utf-8", "replace")
                if raw
                else ""
            )
            self._cmdlines[key] = got
        return got

    def _user(self, pid: int) -> str:
        """The owner's name; callers cache it per process (owners rarely change)."""
        try:
            uid = os.stat(f"{self.root}/{pid}").st_uid
        except OSError:
            return ""
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    def read(
        self,
        now: float,
        gpu_pids: Iterable[int] = (),
        gpu_of: dict[int, GpuUse] | None = None,
        probe: ProbeReading | None = None,
    ) -> HostReading:
        """One tick: the host, plus every process worth showing with its rates.

        ``gpu_of`` maps pid to what the GPU source saw of it. ``probe``
        overrides the /proc estimates of off-CPU and run-queue time when given,
        and adds what only it measures (the wait split, preemptors).
        """
        host = self.read_host()
        dt = None if self._last_t is None else max(1e-6, now - self._last_t)
        self._last_t = now
        gpu_of = gpu_of or {}
        stats: dict[int, _Stat] = {}
        cpu_pct: dict[int, float] = {}
        try:
            entries = os.listdir(self.root)
        except OSError:
            entries = []
        root = self.root
        for name in entries:
            if not name.isdigit():
                continue
            raw = _read(f"{root}/{name}/stat")
            if raw is None:
                continue
            st = parse_stat(raw)
            if st is None:
                continue
            stats[st.pid] = st
            prev = self._prev.get((st.pid, st.start))
            if prev is not None and dt is not None:
                cpu_pct[st.pid] = max(0.0, 100.0 * (st.ticks - prev.ticks) / self.clk_tck / dt)
            else:
                cpu_pct[st.pid] = 0.0

        gpu_set = {p for p in gpu_pids if p in stats} | {p for p in gpu_of if p in stats}
        roles = assign_roles(
            {p: s.ppid for p, s in stats.items()},
            {p: s.comm for p, s in stats.items()},
            gpu_set,
            lambda p: self.cmdline(p, stats[p].start) if p in stats else "",
        )
        self._keep_trainers(roles, stats, now)
        chosen = set(roles) | gpu_set
        # Once rates exist, idle processes are not "top CPU consumers": they would
        # only pad the table.
        chosen.update(
            heapq.nlargest(
                self.top_n,
                (p for p in stats if p not in chosen and (dt is None or cpu_pct[p] > 0)),
                key=cpu_pct.__getitem__,
            )
        )

        # This tick's workers of each trainer: the probe learns them a tick late.
        feeders: dict[int, set[int]] = {}
        for pid, (role, trainer) in roles.items():
            if role == "dataloader" and trainer is not None:
                feeders.setdefault(trainer, set()).add(pid)
        out: list[ProcessSample] = []
        for pid in chosen:
            st = stats[pid]
            role, trainer = roles.get(pid, ("other", None))
            row = self._detail(st, role, trainer, cpu_pct[pid], dt, gpu_of.get(pid), probe)
            if probe is not None and dt is not None:
                prev = self._prev[(pid, st.start)]
                row[0] = _with_probe(row[0], probe, feeders.get(pid, set()), prev)
            out.extend(row)
        if probe is not None:
            out = [_with_preemptors(p, probe, stats) for p in out]

        # Forget processes that are gone; keep cheap per-process state for the rest.
        seen_keys = set()
        for st in stats.values():
            key = (st.pid, st.start)
            seen_keys.add(key)
            prev = self._prev.get(key)
            if prev is None:
                self._prev[key] = _ProcPrev(st.ticks)
            else:
                prev.ticks = st.ticks
        for key in [k for k in self._prev if k not in seen_keys]:
            del self._prev[key]
        for key in [k for k in self._cmdlines if k not in seen_keys]:
            del self._cmdlines[key]
        out.sort(key=lambda p: p.pid)
        return HostReading(host, tuple(out), len(stats))

    def _keep_trainers(
        self, roles: dict[int, tuple[Role, int | None]], stats: dict[int, _Stat], now: float
    ) -> None:
        """A trainer stays one for TRAINER_GRACE_S after its workers are gone.

        Between two epochs without persistent_workers its old workers have
        exited and the new ones are not named yet (spawned ones take seconds to
        start); it is still the same training job, waiting for them.
        """
        for pid, (role, _) in roles.items():
            if role == "trainer":
                self._trainers[(pid, stats[pid].start)] = now
        for key, seen in list(self._trainers.items()):
            pid, start = key
            st = stats.get(pid)
            if st is None or st.start != start or now - seen > TRAINER_GRACE_S:
                del self._trainers[key]
            elif pid not in roles:
                roles[pid] = ("trainer", pid)

    def _detail(
        self,
        st: _Stat,
        role: Role,
        trainer: int | None,
        cpu: float,
        dt: float | None,
        gpu: GpuUse | None,
        probe: ProbeReading | None,
    ) -> list[ProcessSample]:
        """Per-thread reads for one shown process; returns it plus special threads."""
        key = (st.pid, st.start)
        prev = self._prev.get(key)
        if prev is None:
            prev = self._prev[key] = _ProcPrev(st.ticks)
        had_threads = prev.detailed
        pass_ = self._read_threads(st.pid, prev, dt, probe)
        if had_threads:
            prev.preempt_total += pass_.d_invol
            prev.vcsw_total += pass_.d_vol
        else:
            prev.preempt_total, prev.vcsw_total = pass_.tot_invol, pass_.tot_vol
        prev.threads = pass_.new_prev
        prev.detailed = True
        per_s = 1.0 / dt if (dt is not None and had_threads) else 0.0
        if pass_.special and role == "other":
            role, trainer = "trainer", st.pid
        if prev.user is None:
            prev.user = self._user(st.pid)
        gpu = gpu or GpuUse()
        proc = ProcessSample(
            pid=st.pid,
            ppid=st.ppid,
            comm=st.comm,
            cmdline=self.cmdline(st.pid, st.start) or f"[{st.comm}]",
            role=role,
            trainer_pid=trainer,
            cpu_pct=round(cpu, 2),
            offcpu_pct=_r2(pass_.main.offcpu_pct) if pass_.main else None,
            runq_pct=_r2(pass_.main.runq_pct) if pass_.main else None,
            preempt_per_s=round(pass_.d_invol * per_s, 2),
            preempt_total=prev.preempt_total,
            vcsw_per_s=round(pass_.d_vol * per_s, 2),
            gpus=gpu.indices,
            gpu_mem_mib=gpu.mem_mib,
            start_time=st.start,
            user=prev.user,
            nthreads=st.nthreads,
            vcsw_total=prev.vcsw_total,
            gpu_sm_pct=gpu.sm_pct,
            sched_source="procfs" if dt is not None else None,
            threads=tuple(pass_.threads),
            **(NOT_READ if role == "other" else job_cpu_limits(self.root, st.pid)),
        )
        return [proc, *self._special_rows(proc, pass_, role, trainer)]

    def _read_threads(
        self, pid: int, prev: _ProcPrev, dt: float | None, probe: ProbeReading | None
    ) -> _ThreadPass:
        """One pass over the process's threads: samples, switch counts, new baselines."""
        base = f"{self.root}/{pid}/task"
        try:
            tids = [int(t) for t in os.listdir(base)]
        except OSError:
            tids = []
        out = _ThreadPass()
        for tid in tids:
            ctx = parse_status_ctxt(_read(f"{base}/{tid}/status"))
            if ctx is None:
                continue
            tname, vol, invol = ctx
            ss = parse_schedstat(_read(f"{base}/{tid}/schedstat"))
            oncpu, delay = ss if ss is not None else (0, 0)
            out.tot_vol += vol
            out.tot_invol += invol
            tp = prev.threads.get(tid)
            out.new_prev[tid] = _ThreadPrev(oncpu, delay, vol, invol)
            t_cpu = t_off = t_runq = None
            t_pre = t_vcs = 0.0
            if tp is not None and dt is not None and invol >= tp.invol and vol >= tp.vol:
                dv, di = vol - tp.vol, invol - tp.invol
                out.d_vol += dv
                out.d_invol += di
                t_pre, t_vcs = di / dt, dv / dt
                if ss is not None and self._has_schedstat and oncpu >= tp.oncpu:
                    t_cpu = min(100.0, 100.0 * (oncpu - tp.oncpu) / 1e9 / dt)
                    t_off = max(0.0, 100.0 - t_cpu)
                    t_runq = min(100.0, 100.0 * (delay - tp.run_delay) / 1e9 / dt)
            elif prev.detailed and dt is not None:
                # Born during the interval: all its switches happened in it.
                out.d_vol += vol
                out.d_invol += invol
            # The probe's numbers, where it saw this thread for a whole interval,
            # replace the estimates.
            pt = probe.per_tid.get(tid) if probe is not None and dt is not None else None
            if probe is not None and pt is not None:
                pdt = probe.dt_ns or 1
                t_off = min(100.0, 100.0 * (pt.runq_ns + pt.blocked_ns) / pdt)
                t_runq = min(100.0, 100.0 * pt.runq_ns / pdt)
            ts = ThreadSample(
                tid=tid,
                comm=tname,
                cpu_pct=round(t_cpu or 0.0, 2),
                offcpu_pct=_r2(t_off),
                runq_pct=_r2(t_runq),
                preempt_per_s=round(t_pre, 2),
                vcsw_per_s=round(t_vcs, 2),
            )
            out.threads.append(ts)
            if tid == pid:  # the contract's off-CPU and run-queue share: the main thread's
                out.main = ts
            else:
                trole = thread_role_from_comm(tname)
                if trole is not None:
                    out.special.append((ts, trole))
        return out

    def _special_rows(
        self, proc: ProcessSample, pass_: _ThreadPass, role: Role, trainer: int | None
    ) -> list[ProcessSample]:
        """A row of its own for each DataLoader or pin-memory thread of the process."""
        return [
            ProcessSample(
                pid=ts.tid,
                ppid=proc.pid,
                comm=ts.comm,
                cmdline=f"[thread {ts.comm} of {proc.pid}]",
                role=trole,
                trainer_pid=proc.pid if role == "trainer" else trainer,
                cpu_pct=ts.cpu_pct,
                offcpu_pct=ts.offcpu_pct,
                runq_pct=ts.runq_pct,
                preempt_per_s=ts.preempt_per_s,
                preempt_total=pass_.new_prev[ts.tid].invol,
                vcsw_per_s=ts.vcsw_per_s,
                start_time=proc.start_time,
                user=proc.user,
                vcsw_total=pass_.new_prev[ts.tid].vol,
                sched_source=proc.sched_source,
            )
            for ts, trole in pass_.special
        ]


@dataclass(slots=True)
class _ThreadPass:
    """What one pass over a process's threads found."""

    threads: list[ThreadSample] = field(default_factory=list)
    special: list[tuple[ThreadSample, Role]] = field(default_factory=list)
    new_prev: dict[int, _ThreadPrev] = field(default_factory=dict)
    d_vol: int = 0
    d_invol: int = 0
    tot_vol: int = 0
    tot_invol: int = 0
    main: ThreadSample | None = None


def _r2(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _pct(ns: int, dt_ns: int) -> float:
    return round(min(100.0, 100.0 * ns / dt_ns), 2)


def _with_probe(
    proc: ProcessSample, probe: ProbeReading, feeders: set[int], prev: _ProcPrev
) -> ProcessSample:
    """The process with the probe's own measurements: main thread's wait split, rates, stalls.

    ``feeders`` are the process's DataLoader workers as of this tick: wake-ups
    by one the probe did not know yet (born since the last tick) move from
    "other process" to "input".
    """
    pdt = probe.dt_ns or 1
    changes: dict[str, object] = {}
    m = probe.per_tid.get(proc.pid)
    if m is not None and proc.threads and any(t.tid == proc.pid for t in proc.threads):
        late = sum(ns for waker, ns in m.other_wakers if waker in feeders)
        moved = min(late, m.wait_other_ns)
        prev.moved_to_input_ns += moved
        t_in, t_thread, t_irq, t_other = m.wait_totals_ns
        changes.update(
            wait_input_total_ms=round((t_in + prev.moved_to_input_ns) / 1e6, 3),
            wait_thread_total_ms=round(t_thread / 1e6, 3),
            wait_irq_total_ms=round(t_irq / 1e6, 3),
            wait_other_total_ms=round(max(0, t_other - prev.moved_to_input_ns) / 1e6, 3),
            blocked_pct=_pct(m.blocked_ns, pdt),
            wait_input_pct=_pct(m.wait_input_ns + moved, pdt),
            wait_thread_pct=_pct(m.wait_thread_ns, pdt),
            wait_irq_pct=_pct(m.wait_irq_ns, pdt),
            wait_other_pct=_pct(m.wait_other_ns - moved, pdt),
            wait_pending_pct=_pct(m.wait_pending_ns, pdt),
            sched_source="bpf",
        )
    g: TaskSched | None = probe.per_tgid.get(proc.pid)
    if g is not None:
        changes.update(
            preempt_per_s=round(g.nivcsw * 1e9 / pdt, 2),
            vcsw_per_s=round(g.nvcsw * 1e9 / pdt, 2),
            longest_stall_ms=round(g.longest_offcpu_ns / 1e6, 3),
            offcpu_hist=g.hist,
        )
    return replace(proc, **changes) if changes else proc  # type: ignore[arg-type]


MAX_PREEMPTORS = 5


def _with_preemptors(
    proc: ProcessSample, probe: ProbeReading, stats: dict[int, _Stat]
) -> ProcessSample:
    """A watched process with the top preemptors of its lost CPU time (share of that time)."""
    got = probe.preemptors.get(proc.pid)
    if got is None:
        return proc
    total = sum(p.ns for p in got)
    top = tuple(
        Preemptor(
            pid=p.pid,
            comm=stats[p.pid].comm if p.pid in stats else "?",
            share_pct=round(100.0 * p.ns / total, 1),
        )
        for p in got[:MAX_PREEMPTORS]
    )
    return replace(proc, preemptors=top)
