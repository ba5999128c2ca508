"""The join stage: who each process is, which rows are shown, and the probe's numbers in them.

Sources only read (``sources/procfs.py``: a ``ProcScan`` of every process, then a
``ProcDetail`` of each chosen one; ``sources/sched_probe.py``: a
``ProbeReading``). Here, in one place and without I/O:

1. ``choose()`` assigns roles (``model/roles.py``; a trainer keeps its role for
   ``TRAINER_GRACE_S`` while it has no workers) and picks the rows: every GPU
   holder, trainer and DataLoader worker, and the top CPU consumers. It says
   which of them /proc must read the threads of, and for which the job's CPU
   limits.
2. ``join()`` builds each row: /proc's estimates, replaced by the probe's
   measurements where the probe saw a thread or process for the whole interval
   (off-CPU and run-queue share, the wait split, switch rates, stalls,
   preemptors), and names the ``Pipeline`` the probe must watch next.

**The one-tick lag.** The probe classifies a wake-up in the kernel, at the
moment it happens, against the pipeline it was given at its last read: the
workers the join knew one tick earlier. A worker born since then (a new epoch
without ``persistent_workers``) wakes its trainer as "another process". The
probe keeps those wake-ups per waking process (``TaskSched.other_wakers``), and
``join()`` moves the ones by this tick's workers of the trainer to input
(``_with_probe``), keeping a running total per process so the window totals
stay exact. Nothing else needs the lag: from the next read on, the probe
classifies that worker itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gputop.model.frame import CpuLimitSample, Preemptor, ProcessSample, Role, ThreadSample
from gputop.model.readings import (
    CpuLimitReading,
    GpuUse,
    HostReading,
    Pipeline,
    ProbeReading,
    ProcDetail,
    ProcScan,
    ProcStat,
    RankEnv,
    TaskSched,
)
from gputop.model.roles import RoleKeeper, collective_thread, is_launcher, thread_role_from_comm
from gputop.model.workers import with_workers_time

# How long a trainer keeps its role with no DataLoader workers (see _keep_trainers).
TRAINER_GRACE_S = 10.0
MAX_PREEMPTORS = 5
# A job process that waited on the network this much of an interval has its peers read.
NET_PEERS_PCT = 1.0


@dataclass(frozen=True, slots=True)
class RowChoice:
    """The rows of this tick: every process's role, and what /proc must read for the shown ones.

    ``detail``: pid -> whether to read its CPU limits too (training jobs).
    """

    roles: Mapping[int, tuple[Role, int | None]]
    detail: Mapping[int, bool]
    launchers: Mapping[int, int] = field(default_factory=dict)
    """A trainer started by a distributed launcher (torchrun, ...) -> the launcher's pid."""
    peers: frozenset[int] = frozenset()
    """Job processes that waited on the network last tick: whose TCP peers to read."""


def input_pipeline(processes: Iterable[ProcessSample]) -> Pipeline:
    """Who feeds which trainer and whose preemptors to record, from this tick's rows.

    A DataLoader worker process (by pid), a thread worker or pin-memory thread
    (its row's pid is the thread id) -> its trainer's pid. Watched: trainers and
    worker processes. Collective: each trainer's collective-communication threads
    (gloo's, by name) -> the trainer's pid.
    """
    procs = list(processes)
    tids_of = {p.pid: {t.tid for t in p.threads} for p in procs if p.role == "trainer"}
    feeds: dict[int, int] = {}
    watched: set[int] = set()
    for p in procs:
        if p.role in ("dataloader", "pin_memory") and p.trainer_pid is not None:
            feeds[p.pid] = p.trainer_pid
            if p.pid not in tids_of.get(p.trainer_pid, ()):
                watched.add(p.pid)  # a worker process, not a thread of its trainer
        elif p.role == "trainer":
            watched.add(p.pid)
    tids = {t.tid for p in procs for t in p.threads} | {p.pid for p in procs}
    collective = {
        t.tid: p.pid
        for p in procs
        if p.role == "trainer"
        for t in p.threads
        if t.tid != p.pid and collective_thread(t.comm)
    }
    return Pipeline(feeds, frozenset(watched), collective=collective, tids=frozenset(tids))


class HostJoin:
    """Roles, row choice and the merge of /proc with the probe, with the state they need.

    State: when each trainer last had a role (its grace), the pids promoted to
    trainer by their own DataLoader threads (so their CPU limits are read), and
    per process the "other process" wake-ups moved to input so far.
    """

    def __init__(self, top_n: int = 30) -> None:
        self.top_n = top_n
        self._trainers: dict[tuple[int, int], float] = {}
        self._thread_trainers: set[tuple[int, int]] = set()
        self._moved_to_input_ns: dict[tuple[int, int], int] = {}
        self._roles = RoleKeeper()
        # Job processes whose last row waited on the network (their peers are read next).
        self._net_waiters: set[int] = set()
        # The last row made for each process outside the chosen rows (``others``).
        self._others: dict[int, ProcessSample] = {}

    # ---- 1. roles and rows --------------------------------------------------

    def choose(
        self,
        scan: ProcScan,
        now: float,
        gpu_pids: Iterable[int],
        cmdline_of: Callable[[int, int], str],
    ) -> RowChoice:
        """Roles of every process and the rows worth showing (with their detail to read)."""
        stats = scan.procs
        gpu_set = {p for p in gpu_pids if p in stats}
        roles = self._roles.roles(
            stats,
            scan.read,
            gpu_set,
            lambda p: cmdline_of(p, stats[p].start) if p in stats else "",
        )
        self._keep_trainers(roles, stats, now)
        chosen = set(roles) | gpu_set
        # Once rates exist, idle processes are not "top CPU consumers": they would
        # only pad the table. Only the busy ones are candidates (an idle process
        # the probe knows did not run is not even looked at).
        if scan.dt is None:
            candidates: Iterable[int] = stats
        else:
            busy = scan.busy if scan.busy is not None else stats
            candidates = (p for p in busy if p in stats and stats[p].cpu_pct > 0)
        chosen.update(
            heapq.nlargest(
                self.top_n,
                (p for p in candidates if p not in chosen),
                key=lambda p: stats[p].cpu_pct,
            )
        )
        job = {p for p, (role, _) in roles.items() if role != "other"}
        job |= {pid for pid, start in self._thread_trainers if pid in stats}
        launchers = {}
        for pid in job:
            parent = stats[pid].ppid if pid in stats else 0
            if parent in stats and is_launcher(cmdline_of(parent, stats[parent].start)):
                launchers[pid] = parent
        return RowChoice(
            roles=roles,
            detail={p: p in job for p in chosen},
            launchers=launchers,
            peers=frozenset(p for p in self._net_waiters if p in job and p in chosen),
        )

    def _keep_trainers(
        self, roles: dict[int, tuple[Role, int | None]], stats: Mapping[int, ProcStat], now: float
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

    def others(
        self,
        scan: ProcScan,
        choice: RowChoice,
        identity: Callable[[int, int], tuple[str, str]],
    ) -> tuple[ProcessSample, ...]:
        """Every process outside the chosen rows (kernel threads aside), for the TUI's list.

        What the scan read of it, its stat line, and its command line and owner
        (``identity``: read once in the process's life): its CPU share is all it tells
        (``sched_source`` "stat"; its threads and switches are not read). A process whose
        stat line says what it said last tick keeps last tick's row, the same object, so
        a host of idle processes costs a comparison each.
        """
        last = self._others
        rows: dict[int, ProcessSample] = {}
        for pid, st in scan.procs.items():
            if st.kthread or pid in choice.detail:
                continue
            row = last.get(pid)
            if (
                row is None
                or row.start_time != st.start
                or row.cpu_pct != st.cpu_pct
                or row.comm != st.comm
                or row.ppid != st.ppid
                or row.nthreads != st.nthreads
            ):
                cmdline, user = identity(pid, st.start)
                row = ProcessSample(
                    pid=pid,
                    ppid=st.ppid,
                    comm=st.comm,
                    cmdline=cmdline,
                    role="other",
                    trainer_pid=None,
                    cpu_pct=st.cpu_pct,
                    offcpu_pct=None,
                    runq_pct=None,
                    preempt_per_s=0.0,
                    preempt_total=0,
                    vcsw_per_s=0.0,
                    start_time=st.start,
                    user=user,
                    nthreads=st.nthreads,
                    sched_source="stat",
                )
            rows[pid] = row
        self._others = rows
        return tuple(rows.values())

    # ---- 2. the rows ----------------------------------------------------------

    def join(
        self,
        scan: ProcScan,
        choice: RowChoice,
        details: Mapping[int, ProcDetail],
        gpu_of: Mapping[int, GpuUse],
        probe: ProbeReading | None,
    ) -> HostReading:
        """Each shown process's row (and one per DataLoader or pin-memory thread), joined."""
        dt = scan.dt
        # This tick's workers of each trainer (the probe knows last tick's: see the module doc).
        feeders: dict[int, set[int]] = {}
        for pid, (role, trainer) in choice.roles.items():
            if role == "dataloader" and trainer is not None:
                feeders.setdefault(trainer, set()).add(pid)
        with_probe = probe if dt is not None else None
        out: list[ProcessSample] = []
        thread_trainers: set[tuple[int, int]] = set()
        for pid in choice.detail:
            st, d = scan.procs.get(pid), details.get(pid)
            if st is None or d is None:
                continue
            role, trainer = choice.roles.get(pid, ("other", None))
            threads = _threads_with_probe(d.threads, with_probe)
            special = [
                (t, r) for t in threads if t.tid != pid and (r := thread_role_from_comm(t.comm))
            ]
            if special and role == "other":
                role, trainer = "trainer", pid
                thread_trainers.add((pid, st.start))
            proc = _row(st, d, role, trainer, threads, gpu_of.get(pid) or GpuUse(), dt)
            if role == "trainer":
                proc = _with_rank(proc, d, choice.launchers.get(pid))
            rows = [proc, *_thread_rows(proc, d, special, role, trainer)]
            if with_probe is not None:
                rows[0] = self._with_probe(rows[0], with_probe, feeders.get(pid, set()))
            out.extend(rows)
        if probe is not None:
            out = [_with_preemptors(p, probe, scan.procs) for p in out]
        out = with_workers_time(_inferred_throttling(out, dt))
        out.sort(key=lambda p: p.pid)
        self._thread_trainers = thread_trainers
        self._net_waiters = {
            p.pid for p in out if p.role != "other" and (p.net_wait_pct or 0.0) >= NET_PEERS_PCT
        }
        procs = scan.procs
        self._moved_to_input_ns = {
            k: v
            for k, v in self._moved_to_input_ns.items()
            if k[0] in procs and procs[k[0]].start == k[1]
        }
        return HostReading(scan.host, tuple(out), len(scan.procs), input_pipeline(out))

    def _with_probe(
        self, proc: ProcessSample, probe: ProbeReading, feeders: set[int]
    ) -> ProcessSample:
        """The process with the probe's own measurements: main thread's wait split, rates, stalls.

        ``feeders`` are the process's DataLoader workers as of this tick: wake-ups
        by one the probe did not know yet (born since the last tick) move from
        "other process" to "input".
        """
        pdt = probe.dt_ns or 1
        changes: dict[str, object] = {}
        m = probe.per_tid.get(proc.pid)
        if m is not None and any(t.tid == proc.pid for t in proc.threads):
            key = (proc.pid, proc.start_time or 0)
            late = sum(ns for waker, ns in m.other_wakers if waker in feeders)
            moved = min(late, m.wait_other_ns)
            total_moved = self._moved_to_input_ns.get(key, 0) + moved
            self._moved_to_input_ns[key] = total_moved
            t_in, t_thread, t_irq, t_other = m.wait_totals_ns
            changes.update(
                wait_input_total_ms=round((t_in + total_moved) / 1e6, 3),
                wait_thread_total_ms=round(t_thread / 1e6, 3),
                wait_irq_total_ms=round(t_irq / 1e6, 3),
                wait_other_total_ms=round(max(0, t_other - total_moved) / 1e6, 3),
                blocked_pct=_pct(m.blocked_ns, pdt),
                io_wait_pct=_pct(m.io_wait_ns, pdt),
                wait_input_pct=_pct(m.wait_input_ns + moved, pdt),
                wait_thread_pct=_pct(m.wait_thread_ns, pdt),
                wait_irq_pct=_pct(m.wait_irq_ns, pdt),
                wait_other_pct=_pct(m.wait_other_ns - moved, pdt),
                wait_collective_pct=_pct(m.wait_collective_ns, pdt),
                net_wait_pct=_pct(m.wait_net_ns, pdt),
                wait_pending_pct=_pct(m.wait_pending_ns, pdt),
                runq_after_input_pct=_pct(m.runq_after_input_ns, pdt),
                sched_source="bpf",
            )
            if probe.throttle_measured and proc.cpu_limit is not None:
                changes.update(
                    cpu_throttled_pct=_pct(m.throttled_ns, pdt),
                    cpu_limit=replace(proc.cpu_limit, throttled_source="bpf"),
                )
            if proc.pid in probe.cuda_tgids:
                changes.update(
                    gpu_sync_pct=_pct(m.sync_ns, pdt),
                    gpu_sync_spin_pct=_pct(m.sync_oncpu_ns, pdt),
                    gpu_sync_runq_pct=_pct(m.sync_runq_ns, pdt),
                    h2d_copy_pct=_pct(m.h2d_ns, pdt),
                    h2d_copy_cpu_pct=_pct(m.h2d_oncpu_ns, pdt),
                    h2d_copy_runq_pct=_pct(m.h2d_runq_ns, pdt),
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


def _r2(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _pct(ns: int, dt_ns: int) -> float:
    return round(min(100.0, 100.0 * ns / dt_ns), 2)


def _threads_with_probe(
    threads: Iterable[ThreadSample], probe: ProbeReading | None
) -> list[ThreadSample]:
    """/proc's thread samples, with the probe's off-CPU and run-queue share where it has them."""
    if probe is None:
        return list(threads)
    pdt = probe.dt_ns or 1
    out = []
    for t in threads:
        pt = probe.per_tid.get(t.tid)
        if pt is not None:
            t = replace(
                t,
                offcpu_pct=_r2(min(100.0, 100.0 * (pt.runq_ns + pt.blocked_ns) / pdt)),
                runq_pct=_r2(min(100.0, 100.0 * pt.runq_ns / pdt)),
            )
        out.append(t)
    return out


def _row(
    st: ProcStat,
    d: ProcDetail,
    role: Role,
    trainer: int | None,
    threads: list[ThreadSample],
    gpu: GpuUse,
    dt: float | None,
) -> ProcessSample:
    """A process's row from /proc; its off-CPU and run-queue share are its main thread's."""
    main = next((t for t in threads if t.tid == st.pid), None)
    per_s = 1.0 / dt if (dt is not None and d.rates) else 0.0
    ident = d.identity
    return ProcessSample(
        pid=st.pid,
        ppid=st.ppid,
        comm=st.comm,
        cmdline=d.cmdline,
        role=role,
        trainer_pid=trainer,
        cpu_pct=round(st.cpu_pct, 2),
        offcpu_pct=main.offcpu_pct if main else None,
        runq_pct=main.runq_pct if main else None,
        preempt_per_s=round(d.d_invol * per_s, 2),
        preempt_total=d.preempt_total,
        vcsw_per_s=round(d.d_vol * per_s, 2),
        gpus=gpu.indices,
        gpu_mem_mib=gpu.mem_mib,
        start_time=st.start,
        user=d.user,
        nthreads=st.nthreads,
        vcsw_total=d.vcsw_total,
        gpu_sm_pct=gpu.sm_pct,
        sched_source="procfs" if dt is not None else None,
        threads=tuple(threads),
        cpus_allowed=d.cpus_allowed if role != "other" else None,
        cpu_quota=d.cpu_quota if role != "other" else None,
        **_limit_fields(d.cpu_limit if role != "other" else None),
        storage=d.storage if role != "other" else None,
        peers=d.peers if role != "other" else None,
        container_id=ident.container_id if ident else None,
        container_runtime=ident.runtime if ident else None,
        pod_uid=ident.pod_uid if ident else None,
        pod_name=ident.pod_name if ident else None,
        pod_namespace=ident.pod_namespace if ident else None,
        slurm_job_id=ident.slurm.job_id if ident and ident.slurm else None,
        slurm_step_id=ident.slurm.step_id if ident and ident.slurm else None,
    )


def _with_rank(proc: ProcessSample, d: ProcDetail, launcher: int | None) -> ProcessSample:
    """A trainer with its distributed job and rank: from its environment where readable,
    else its job alone from its launcher (the ranks one torchrun started on this node).

    A rank ``srun`` started (no RANK or WORLD_SIZE, or no job named by them) takes them
    from SLURM: SLURM_PROCID of SLURM_NTASKS, and the job ``slurm-<job>.<step>``.
    """
    env = d.rank_env
    slurm = d.identity.slurm if d.identity is not None else None
    srun = slurm is not None and slurm.procid is not None and (slurm.ntasks or 0) > 1
    if env is None and srun and slurm is not None:
        env = RankEnv(rank=slurm.procid, local_rank=slurm.task_id, world_size=slurm.ntasks)
    if env is not None:
        job = env.job_id
        if job is None and srun and slurm is not None:
            job = f"slurm-{slurm.job_id}.{slurm.step_id or 0}"
        job = job or (f"launcher-{launcher}" if launcher is not None else None)
        return replace(
            proc,
            job_id=job,
            rank=env.rank,
            world_size=env.world_size,
            local_rank=env.local_rank,
        )
    if launcher is not None:
        return replace(proc, job_id=f"launcher-{launcher}")
    return proc


def _limit_fields(limit: CpuLimitReading | None) -> dict[str, Any]:
    """ProcessSample's fields for its cgroup CPU limit and the kernel's throttling counters."""
    if limit is None:
        return {}
    ns = limit.throttled_ns
    return {
        "cpu_limit": CpuLimitSample(
            cgroup=limit.cgroup,
            file=limit.limit_file,
            burst=limit.burst_cpus,
            periods=limit.periods,
            throttled_periods=limit.throttled_periods,
            throttled_ms=None if ns is None else round(ns / 1e6, 3),
        )
    }


def _inferred_throttling(rows: list[ProcessSample], dt: float | None) -> list[ProcessSample]:
    """Throttled shares the probe did not measure, inferred from each cgroup's ``cpu.stat``.

    The kernel counts a throttled cgroup's time per CPU run queue; every moment of it
    some of the cgroup's threads were runnable and held back. So of the run-queue time
    of the cgroup's threads gputop shows, that much (at most all of it) was the limit,
    and each main thread's run-queue share is split in that proportion. Where the probe
    measured some of the cgroup's processes, only what their measured time leaves of
    the cgroup's is shared among the others.
    """
    if not dt:
        return rows
    runq: dict[str, float] = {}
    throttled: dict[str, float] = {}
    measured: dict[str, float] = {}
    for p in rows:
        lim = p.cpu_limit
        if lim is None or lim.throttled_ms is None:
            continue
        if p.cpu_throttled_pct is not None:
            measured[lim.cgroup] = measured.get(lim.cgroup, 0.0) + p.cpu_throttled_pct
            continue
        throttled[lim.cgroup] = 100.0 * lim.throttled_ms / 1000.0 / dt
        runq[lim.cgroup] = runq.get(lim.cgroup, 0.0) + sum(t.runq_pct or 0.0 for t in p.threads)
    if not throttled:
        return rows
    for cg, pct in measured.items():
        if cg in throttled:
            throttled[cg] = max(0.0, throttled[cg] - pct)
    out = []
    for p in rows:
        cg = p.cpu_limit.cgroup if p.cpu_limit is not None else ""
        if (
            p.cpu_throttled_pct is None
            and cg in throttled
            and p.cpu_limit is not None
            and p.runq_pct is not None
        ):
            share = min(1.0, throttled[cg] / runq[cg]) if runq[cg] > 0 else 0.0
            p = replace(
                p,
                cpu_throttled_pct=round(p.runq_pct * share, 2),
                cpu_limit=replace(p.cpu_limit, throttled_source="cpu.stat"),
            )
        out.append(p)
    return out


def _thread_rows(
    proc: ProcessSample,
    d: ProcDetail,
    special: list[tuple[ThreadSample, Role]],
    role: Role,
    trainer: int | None,
) -> list[ProcessSample]:
    """A row of its own for each DataLoader or pin-memory thread of the process."""
    rows = []
    for ts, trole in special:
        vol, invol = d.switch_totals.get(ts.tid, (0, 0))
        rows.append(
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
                preempt_total=invol,
                vcsw_per_s=ts.vcsw_per_s,
                start_time=proc.start_time,
                user=proc.user,
                vcsw_total=vol,
                sched_source=proc.sched_source,
                container_id=proc.container_id,
                container_runtime=proc.container_runtime,
                pod_uid=proc.pod_uid,
                pod_name=proc.pod_name,
                pod_namespace=proc.pod_namespace,
            )
        )
    return rows


def _with_preemptors(
    proc: ProcessSample, probe: ProbeReading, stats: Mapping[int, ProcStat]
) -> ProcessSample:
    """A watched process with the top preemptors of its run-queue time (share of all of it).

    A share is of the time its threads waited for a CPU, not of the part charged to
    someone: where the CPU went idle while the process was held back (its CPU limit),
    nobody is charged, and the little that is charged must not read as the cause.
    """
    got = probe.preemptors.get(proc.pid)
    if got is None:
        return proc
    group = probe.per_tgid.get(proc.pid)
    runq_ns = group.runq_ns if group is not None else 0
    # Charges and the run-queue total come from separate maps read a moment apart.
    total = max(runq_ns, sum(p.ns for p in got))
    top = tuple(
        Preemptor(
            pid=p.pid,
            comm=stats[p.pid].comm if p.pid in stats else "?",
            share_pct=round(100.0 * p.ns / total, 1),
            kernel=p.pid in stats and stats[p.pid].kthread,
        )
        for p in got[:MAX_PREEMPTORS]
    )
    # Summed over its threads: can exceed 100.
    runq_threads_pct = round(100.0 * total / (probe.dt_ns or 1), 2)
    return replace(proc, preemptors=top, runq_threads_pct=runq_threads_pct)
