"""What the sources read in one tick: plain values, the model's input.

/proc (``sources/procfs.py``) gives a ``ProcScan`` of every process and a
``ProcDetail`` of each one chosen to be shown; the scheduler probe reads its
kernel maps into ``ProbeRows`` and the pure accounting
(``model/sched_intervals.py``) turns them into a ``ProbeReading``; the join stage
(``model/hostjoin.py``) builds each process's row from them and names the
``Pipeline`` the probe watches next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gputop.model.frame import HostSample, NetPeer, OpenStorage, ProcessSample, ThreadSample
from gputop.model.probe_abi import GroupT, ThreadT


@dataclass(frozen=True, slots=True)
class ProbeRows:
    """One read of the probe's kernel maps: running totals, as the kernel holds them.

    ``threads``/``groups``: (tid or tgid, row). ``preempt``: (watched victim
    tgid, runner tgid) -> (ns, runs) so far. ``woke``: (watched thread, waking
    tgid) -> blocked ns so far, for stretches that have ended (woken-but-running
    stretches are credited from ``threads``). ``ended_epoch``: the epoch user
    space closed with this read (the longest stretch per epoch is kept in two
    slots). ``watched``: processes watched (their preemptors recorded) through
    the whole interval. ``cuda_tgids``: processes whose CUDA driver library was
    probed through the whole interval. ``active``: processes that ran, exited or
    exec'd since the last read (None: not known, read every process);
    ``execd``: those that exec'd. ``map_errors``: failed map updates since the
    last read. ``baseline_only``: the first read after attaching, whose window
    began part-way through an interval: it only sets the baselines.
    ``throttle_measured``: the program tells a thread held back by its cgroup's
    CPU limit (its rows' ``throttled_ns``) from one waiting for a CPU.
    """

    now_ns: int
    dt_ns: int
    ended_epoch: int
    threads: Sequence[tuple[int, ThreadT]]
    groups: Sequence[tuple[int, GroupT]]
    preempt: Mapping[tuple[int, int], tuple[int, int]]
    woke: Mapping[tuple[int, int], int]
    watched: frozenset[int] = frozenset()
    cuda_tgids: frozenset[int] = frozenset()
    active: frozenset[int] | None = None
    execd: frozenset[int] = frozenset()
    map_errors: int = 0
    baseline_only: bool = False
    throttle_measured: bool = False


@dataclass(frozen=True, slots=True)
class TaskSched:
    """Scheduler deltas for one thread or one thread group over one probe interval."""

    runq_ns: int = 0
    blocked_ns: int = 0
    oncpu_ns: int = 0
    nivcsw: int = 0
    nvcsw: int = 0
    longest_offcpu_ns: int = 0
    hist: tuple[int, ...] | None = None
    # Context switches the probe detected it had not been shown (their time is partly lost).
    missed_switches: int = 0
    # Blocked time split by who woke the thread (per thread only; 0 for a thread group).
    wait_input_ns: int = 0
    wait_thread_ns: int = 0
    wait_irq_ns: int = 0
    wait_other_ns: int = 0
    # Woken by a collective-communication thread of its own process (gloo's): inside a
    # collective, waiting for the other ranks.
    wait_collective_ns: int = 0
    # Woken by network receive processing (the NET_RX softirq, or a network socket's
    # data-ready): waiting on a remote peer's data.
    wait_net_ns: int = 0
    # Blocked and not (yet) known who woke it: still asleep at the read, or its
    # waking was not seen. Time reported here is not reported again when the
    # waker becomes known.
    wait_pending_ns: int = 0
    # Of wait_other_ns, for a watched thread: (waking process's tgid, ns), so the
    # caller can count a worker that the probe did not know yet as input.
    other_wakers: tuple[tuple[int, int], ...] = ()
    # Running totals (since the probe first saw the thread) of blocked time whose
    # waker is known: (input, thread, irq, other) ns. Differences between two
    # reads give a window's split exactly, pending stretches included once woken.
    wait_totals_ns: tuple[int, int, int, int] = (0, 0, 0, 0)
    # Inside CUDA synchronization calls (per thread; 0 where libcuda is not probed):
    # all of it, and the parts on a CPU (spinning), runnable, and blocked.
    sync_ns: int = 0
    sync_oncpu_ns: int = 0
    sync_runq_ns: int = 0
    wait_sync_ns: int = 0
    # Run-queue wait right after a wake-up by the input pipeline (the batch arrived).
    runq_after_input_ns: int = 0
    # Inside host-to-device copies (per thread; 0 where libcuda is not probed): all of it,
    # and the parts on a CPU, runnable, and blocked.
    h2d_ns: int = 0
    h2d_oncpu_ns: int = 0
    h2d_runq_ns: int = 0
    wait_h2d_ns: int = 0
    # Of runq_ns: held back by its cgroup's CPU limit (only where throttle_measured).
    throttled_ns: int = 0
    # Of blocked_ns: in uninterruptible sleep (D at the switch-out: disk I/O, a page
    # fault on a mapped file), up to its wakeup. Both builds of the probe tell it.
    io_wait_ns: int = 0


@dataclass(frozen=True, slots=True)
class PreemptorTime:
    """Run-queue time a watched process lost to preemptions by one other process."""

    pid: int
    """The preempting process (its tgid; a kernel thread's pid)."""
    ns: int
    count: int


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What the scheduler probe saw since its previous read."""

    dt_ns: int
    per_tgid: dict[int, TaskSched]
    per_tid: dict[int, TaskSched]
    map_errors: int = 0
    # Watched process (tgid) -> who preempted it in the interval, most time first;
    # () when watched for the whole interval and never preempted. Processes not
    # watched for the whole interval are absent.
    preemptors: dict[int, tuple[PreemptorTime, ...]] = field(default_factory=dict)
    # Processes whose CUDA driver library is probed (their sync time is measured, 0 included).
    cuda_tgids: frozenset[int] = frozenset()
    # Processes that ran, exited or exec'd in the interval (or run now): the only ones
    # /proc must read again. None: not known (every process must be read).
    active: frozenset[int] | None = None
    execd: frozenset[int] = frozenset()
    # The probe told throttled run-queue time apart (TaskSched.throttled_ns is measured).
    throttle_measured: bool = False
    # Threads of per_tid that neither ran nor waited for a CPU in the interval: their
    # /proc counters cannot have moved, so /proc need not read them again.
    idle_tids: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class ProcStat:
    """One process as its ``/proc/PID/stat`` read this tick, with its CPU share since the last."""

    pid: int
    ppid: int
    comm: str
    state: str
    start: int  # start time in clock ticks since boot: with pid, the process's identity
    nthreads: int
    kthread: bool
    cpu_pct: float  # % of one CPU since the previous scan (0 on the first)


@dataclass(frozen=True, slots=True)
class ProcScan:
    """The first /proc pass of a tick: the host and one stat line of every process."""

    host: HostSample
    procs: Mapping[int, ProcStat]
    dt: float | None  # seconds since the previous scan; None on the first
    # The processes whose stat line was read this time (None: all of them), and the
    # ones with a CPU share above 0: the rest did not run since the last scan.
    read: frozenset[int] | None = None
    busy: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class SlurmIdentity:
    """A process's SLURM job and step (strings: the step may be ``batch``), from its cgroup
    path or its environment; ``task_id``: its task on this node (``task_<t>``,
    ``SLURM_LOCALID``); ``procid`` and ``ntasks``: its rank among the step's tasks and their
    number (``SLURM_PROCID``, ``SLURM_NTASKS``: environment only)."""

    job_id: str
    step_id: str | None = None
    task_id: int | None = None
    procid: int | None = None
    ntasks: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerIdentity:
    """A process's container (id, runtime) and, under Kubernetes, its pod; its SLURM job."""

    container_id: str | None = None
    runtime: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    slurm: SlurmIdentity | None = None


@dataclass(frozen=True, slots=True)
class RankEnv:
    """What a distributed job's launcher put in a rank's environment (torchrun, DeepSpeed).

    ``run_id``: ``TORCHELASTIC_RUN_ID`` (torchrun's rendezvous id, the same on every
    node); ``master``: ``MASTER_ADDR:MASTER_PORT`` (the same on every node too).
    """

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    run_id: str | None = None
    master: str | None = None

    @property
    def job_id(self) -> str | None:
        """The job this rank belongs to, named the same on every node; None where not told.

        torchrun without a rendezvous id says ``none``: the master's address names it then.
        """
        if self.run_id and self.run_id != "none":
            return self.run_id
        return self.master


@dataclass(frozen=True, slots=True)
class CpuLimitReading:
    """A job's cgroup CPU limit (CFS bandwidth control) and its throttling over one tick.

    ``cgroup``: the directory of the level with the tightest limit, where the kernel
    throttles; ``limit_file``: ``cpu.max`` (v2) or ``cpu.cfs_quota_us`` (v1). The
    counters are that level's ``cpu.stat`` changes since the previous tick (None
    the first time it is read, or where it has no ``cpu.stat``): CFS periods,
    periods in which it was throttled, and throttled time summed over its CPUs.
    """

    cgroup: str
    quota_cpus: float
    burst_cpus: float | None = None
    limit_file: str = "cpu.max"
    periods: int | None = None
    throttled_periods: int | None = None
    throttled_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ProcDetail:
    """The second /proc pass, for one process chosen to be shown: its threads and totals.

    Thread samples carry /proc's estimates (schedstat and the switch counters);
    the join stage puts the probe's numbers over them where it has them.
    ``switch_totals``: tid -> (voluntary, involuntary) switches since the
    thread started. ``rates``: the process's threads were read last tick too,
    so ``d_vol``/``d_invol`` cover one interval (else they are 0 and the
    per-second rates are not known yet).
    """

    cmdline: str
    user: str
    threads: tuple[ThreadSample, ...]
    switch_totals: Mapping[int, tuple[int, int]]
    d_vol: int
    d_invol: int
    rates: bool
    vcsw_total: int  # voluntary switches of the process since gputop first read its threads
    preempt_total: int  # involuntary ones, likewise
    cpus_allowed: tuple[int, ...] | None = None  # read for training jobs only
    cpu_quota: float | None = None
    cpu_limit: CpuLimitReading | None = None  # read for training jobs only
    identity: ContainerIdentity | None = None
    # What it had open for reading, read when a training job's process was in D state.
    storage: tuple[OpenStorage, ...] | None = None
    # Its TCP peers, read when a training job's process waited on the network last tick.
    peers: tuple[NetPeer, ...] | None = None
    # Its distributed rank, from /proc/PID/environ (training jobs only; None: not a rank,
    # or its environment is not readable).
    rank_env: RankEnv | None = None


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What the probe watches: who feeds which trainer, and whose preemptors to record.

    ``feeds``: a DataLoader worker process (tgid), thread worker or pin-memory
    thread (tid) -> the pid of the trainer it feeds. ``watched``: trainers and
    worker processes, the processes whose lost CPU time the diagnosis explains.
    ``tids``: the threads of every process shown, whose kernel rows the probe
    reads (an idle process nobody shows costs the probe nothing).
    """

    feeds: Mapping[int, int] = field(default_factory=dict)
    watched: frozenset[int] = frozenset()
    # A distributed rank's collective-communication threads (tid) -> the rank's pid: their
    # wake-ups of its threads are waiting in a collective, not its own threads' work.
    collective: Mapping[int, int] = field(default_factory=dict)
    # The threads of the rows shown: the probe reads their rows only (None: every row).
    tids: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class HostReading:
    """A tick's host and the processes worth showing, joined from /proc and the probe.

    ``pipeline``: what the probe must watch from its next read on (the join's
    output; see ``model/hostjoin.py``).
    """

    host: HostSample
    processes: tuple[ProcessSample, ...]
    all_count: int
    pipeline: Pipeline = field(default_factory=lambda: Pipeline())
    # The probe's interval went into the rows (the frame's scheduler source is "bpf").
    from_probe: bool = False
    # Every other process (the TUI's list; empty where not asked for): ``Frame.others``.
    others: tuple[ProcessSample, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What the GPU source says about one process: its GPUs, memory and SM share."""

    indices: tuple[int, ...] = ()
    mem_mib: int | None = None
    sm_pct: float | None = None

    def plus(self, index: int, mem_mib: int | None, sm_pct: float | None) -> GpuUse:
        """This use with one more GPU's numbers added."""
        return GpuUse(
            (*self.indices, index),
            self.mem_mib if mem_mib is None else (self.mem_mib or 0) + mem_mib,
            self.sm_pct if sm_pct is None else (self.sm_pct or 0.0) + sm_pct,
        )
