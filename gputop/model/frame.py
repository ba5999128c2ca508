"""Immutable records of one sampler tick: the JSON frame of CONTRACT.md section 2.

Every field named in the contract is here under the same name; extra fields are
documented in docs/frame.md. ``None`` always means "this source cannot report it",
never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from gputop.model.checked import build, check_value

Role = Literal["trainer", "dataloader", "pin_memory", "other"]
"""What a process does for a training job (CONTRACT.md section 2)."""
VerdictState = Literal[
    "ok",
    "busy_but_starving",
    "low_sm_efficiency",
    "input_bound",
    "host_bound",
    "throttled",
    "idle",
    "unknown",
]
"""The states a GPU's verdict can be in (CONTRACT.md section 2)."""
Cause = Literal[
    "cpu_contention",
    "cpu_limit",
    "input_compute",
    "input_storage",
    "input_remote",
    "transfer",
    "trainer_work",
    "straggler",
    "gpu_side",
    "clocks",
]
"""What holds a GPU back, the first of its verdict's evidence (CONTRACT.md section 2)."""
ROLES: tuple[Role, ...] = get_args(Role)
VERDICT_STATES: tuple[VerdictState, ...] = get_args(VerdictState)
CAUSES: tuple[Cause, ...] = get_args(Cause)


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether one source is live and, when it is not, why and how to fix it."""

    name: str
    kind: str
    live: bool
    reason: str | None = None
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class HostSample:
    """Whole-machine CPU and memory pressure for one tick."""

    cpu_pct: float
    ncpu: int
    load1: float
    load5: float = 0.0
    load15: float = 0.0
    psi_cpu_some: float | None = None
    psi_cpu_full: float | None = None
    psi_io_some: float | None = None
    """I/O pressure (``/proc/pressure/io`` some, avg10): % of time some task waited on I/O."""
    per_cpu_pct: tuple[float, ...] = ()
    mem_used_mib: int = 0
    mem_total_mib: int = 0
    procs_running: int = 0
    cpus_online: tuple[int, ...] = ()
    """Ids of the online CPUs (``/sys/devices/system/cpu/online``); empty when unknown."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU in one tick. ``util`` is GPU_UTIL; ``sm_active`` is real SM work."""

    index: int
    uuid: str
    name: str
    util: float | None
    sm_active: float | None
    power_w: float | None
    power_limit_w: float | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    throttle: tuple[str, ...] = ()
    state: str = "ok"
    mem_util: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    power_avg_w: float | None = None
    # Where sm_active (and occupancy, tensor, DRAM) came from: "gpm" (NVML), "dcgm"
    # (a dcgm-exporter on the node), "demo"; None while SM activity is n/a.
    sm_source: str | None = None
    lost_gpu_s: dict[Cause, float] | None = field(default=None, hash=False)
    """Seconds of this GPU's time lost to each cause (``{cause: seconds}``) since gputop
    started counting (``lost_since``), or over a replayed bundle's window; None: not counted
    (frames written before it existed)."""
    lost_since: float | None = None
    """Unix time the count of ``lost_gpu_s`` began."""
    pcie_gen: int | None = None
    """The PCIe link's current generation (it trains down while idle); None: n/a."""
    pcie_gen_max: int | None = None
    """The highest generation this GPU and its slot allow."""
    pcie_width: int | None = None
    """The link's current width (lanes)."""
    pcie_width_max: int | None = None
    pcie_tx_kb_s: float | None = None
    """PCIe throughput out of the GPU (to the host), KB/s, NVML's 20 ms sample."""
    pcie_rx_kb_s: float | None = None
    """PCIe throughput into the GPU (host-to-device copies), KB/s."""

    @property
    def power_pct(self) -> float | None:
        """Power draw as a share of the enforced limit, 0-100, or None."""
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w

    @property
    def efficiency(self) -> float | None:
        """SM activity divided by GPU_UTIL (0-1); None when either is unknown."""
        if self.sm_active is None or self.util is None or self.util <= 0:
            return None
        return min(1.0, self.sm_active / self.util)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process seen by the GPU source: which GPU, how much memory, its SM share."""

    pid: int
    gpu_index: int
    gpu_mem_mib: int | None = None
    sm_pct: float | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What a GPU source returns for one tick."""

    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadSample:
    """Scheduling numbers for one thread of a process."""

    tid: int
    comm: str
    cpu_pct: float
    offcpu_pct: float | None
    runq_pct: float | None
    preempt_per_s: float
    vcsw_per_s: float


@dataclass(frozen=True, slots=True)
class Preemptor:
    """A process that took the CPU from a watched process when it was preempted."""

    pid: int
    comm: str
    share_pct: float
    """Share of the run-queue time lost to preemptions that this process caused, 0-100."""
    kernel: bool = False
    """A kernel thread (kworker, ksoftirqd, ...): said as such, never put into a fix."""


@dataclass(frozen=True, slots=True)
class CpuLimitSample:
    """A job process's cgroup CPU limit and what the kernel's ``cpu.stat`` counted in the tick."""

    cgroup: str
    """The cgroup directory whose limit is the process's ``cpu_quota`` (where it is throttled)."""
    file: str
    """``cpu.max`` (cgroup v2) or ``cpu.cfs_quota_us`` (v1)."""
    burst: float | None = None
    """CPUs' worth of burst allowed on top (``cpu.max.burst``); None: none set."""
    periods: int | None = None
    """CFS periods in the interval; None: not counted yet (first read)."""
    throttled_periods: int | None = None
    """Of those, the periods in which the kernel throttled the cgroup."""
    throttled_ms: float | None = None
    """The cgroup's throttled time in the interval, summed over its CPUs."""
    throttled_source: str | None = None
    """How the process's ``cpu_throttled_pct`` was had: "bpf" (measured at each switch-out)
    or "cpu.stat" (inferred from the cgroup's throttled time and the job's run-queue time)."""


@dataclass(frozen=True, slots=True)
class OpenStorage:
    """A filesystem or block device a process had files open on for reading, seen while
    it waited in uninterruptible sleep (``gputop/sources/storage.py``)."""

    mount: str
    """Where it is mounted in the process's mount table; "" for a block device read directly."""
    fstype: str
    """The filesystem type (``ext4``, ``nfs4``, ``fuse.s3fs``), or "block device"."""
    source: str
    """What is mounted there (``/dev/nvme0n1p1``, ``server:/export``), or the device's path."""

    def describe(self) -> str:
        """``/data (ext4 on /dev/sdb1)``, or ``/dev/loop3 (block device)``."""
        if not self.mount:
            return f"{self.source} ({self.fstype})"
        return f"{self.mount} ({self.fstype} on {self.source})"


@dataclass(frozen=True, slots=True)
class NetPeer:
    """The remote end of a process's established TCP connection (``gputop/sources/sockets.py``)."""

    address: str  # 10.0.4.12, 2001:db8::7 (an IPv4-mapped IPv6 address as IPv4)
    port: int

    def describe(self) -> str:
        """``10.0.4.12:9000``, ``[2001:db8::7]:9000``."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class WorkersTime:
    """Where a trainer's DataLoader workers spent the interval: each part the mean share of
    one worker's main thread (the parts sum to 100), measured as the trainer's own split."""

    workers: int  # the worker processes the means are over
    cpu_pct: float
    """On a CPU (loading, decoding, collating)."""
    runq_pct: float
    """Runnable, waiting for a CPU (outside its cgroup's limit)."""
    throttled_pct: float | None
    """Runnable, held back by its cgroup's CPU limit; None where no limit applies."""
    io_wait_pct: float | None
    """Blocked in uninterruptible sleep (disk I/O); None without the probe."""
    net_wait_pct: float | None
    """Blocked until network receive processing woke it (a remote read); None without the
    probe."""
    blocked_pct: float
    """Blocked otherwise (a lock, a sleep, its index queue); under /proc alone all of its
    blocked time."""


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process in one tick (contract fields first, then gputop's extras)."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    role: Role
    trainer_pid: int | None
    cpu_pct: float
    offcpu_pct: float | None
    runq_pct: float | None
    preempt_per_s: float
    preempt_total: int
    vcsw_per_s: float
    gpus: tuple[int, ...] = ()
    gpu_mem_mib: int | None = None
    start_time: int = 0
    user: str = ""
    nthreads: int = 1
    vcsw_total: int = 0
    blocked_pct: float | None = None
    longest_stall_ms: float | None = None
    offcpu_hist: tuple[int, ...] | None = None
    gpu_sm_pct: float | None = None
    # Why the main thread was blocked, by who woke it (eBPF only; None under /proc alone).
    wait_input_pct: float | None = None
    wait_thread_pct: float | None = None
    wait_irq_pct: float | None = None
    wait_other_pct: float | None = None
    preemptors: tuple[Preemptor, ...] | None = None
    # Blocked with no known waker yet (still asleep at the end of the interval); eBPF only.
    wait_pending_pct: float | None = None
    # Where this row's scheduler numbers came from: "bpf" or "procfs" (None: not recorded);
    # "stat" for ``Frame.others``: its stat line only (no scheduler numbers were read).
    sched_source: str | None = None
    # Running totals of the main thread's blocked time by waker, ms (eBPF only): a
    # window's exact split is the difference between its two edge frames.
    wait_input_total_ms: float | None = None
    wait_thread_total_ms: float | None = None
    wait_irq_total_ms: float | None = None
    wait_other_total_ms: float | None = None
    # The part of runq_pct right after a wake-up by the input pipeline: the batch had
    # arrived and the main thread waited for a CPU to take it (eBPF only).
    runq_after_input_pct: float | None = None
    # Main thread inside CUDA synchronization calls (asleep, runnable or spinning), and
    # the parts of that on a CPU (spinning) and waiting for one; None where not measured
    # (no probe, or the process's libcuda not probed), a measured 0 where it maps it
    # and never waits.
    gpu_sync_pct: float | None = None
    gpu_sync_spin_pct: float | None = None
    gpu_sync_runq_pct: float | None = None
    # Main thread inside host-to-device copies (cuMemcpyHtoD*, and the generic copies from
    # host memory), and the parts of that on a CPU (the driver staging pageable memory) and
    # waiting for one; None where not measured, as gpu_sync_pct.
    h2d_copy_pct: float | None = None
    h2d_copy_cpu_pct: float | None = None
    h2d_copy_runq_pct: float | None = None
    # All its threads waiting for a CPU, % of the interval (summed: can exceed 100); the
    # base of its preemptors' shares (eBPF only, for the processes whose preemptors are kept).
    runq_threads_pct: float | None = None
    cpus_allowed: tuple[int, ...] | None = None
    """CPUs the main thread may run on (its affinity); None where not read (role ``other``)."""
    cpu_quota: float | None = None
    """CPUs' worth of time its cgroup allows (tightest ``cpu.max`` up the tree); None: no limit."""
    cpu_throttled_pct: float | None = None
    """Main thread runnable but held back by its cgroup's CPU limit, % of the interval (part
    of ``runq_pct``); None where no limit applies or it could not be told."""
    io_wait_pct: float | None = None
    """Main thread blocked in uninterruptible sleep (D: disk I/O, page faults on mapped
    files), % of the interval (part of ``blocked_pct``); None without the probe."""
    net_wait_pct: float | None = None
    """Main thread blocked until network receive processing woke it (the NET_RX softirq, or
    a network socket's data-ready): waiting on a remote peer, % of the interval (part of
    ``blocked_pct``); None without the probe."""
    peers: tuple[NetPeer, ...] | None = None
    """Whom it reads from over the network: the peers of its established TCP connections,
    read when a training job's process waited on the network the interval before; None
    where not read this tick."""
    workers_time: WorkersTime | None = None
    """A trainer's DataLoader workers' time split, the mean of theirs; None for every other
    process and for a trainer without workers."""
    cpu_limit: CpuLimitSample | None = None
    """Its cgroup CPU limit with the kernel's throttling counters (training jobs only)."""
    storage: tuple[OpenStorage, ...] | None = None
    """Filesystems and block devices it had open for reading, read when its stat line showed
    it in uninterruptible sleep (training jobs only); None where not read this tick."""
    # The container and Kubernetes pod the process runs in, from its cgroup path
    # (gputop/sources/cgroup.py); None outside containers or where not derivable.
    container_id: str | None = None
    container_runtime: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    wait_collective_pct: float | None = None
    """Main thread blocked until one of its collective-communication threads woke it (gloo's:
    inside a collective, waiting for the other ranks), % of the interval; None without the
    probe."""
    # A distributed job's rank on this node (trainers only): from its environment (RANK,
    # LOCAL_RANK, WORLD_SIZE; the job from TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT),
    # or, where that is not readable, its launcher's process tree (the job only).
    job_id: str | None = None
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    # Its SLURM job and step (strings: a step may be "batch"), from its cgroup path or its
    # environment (sources/slurm.py); None outside SLURM.
    slurm_job_id: str | None = None
    slurm_step_id: str | None = None
    threads: tuple[ThreadSample, ...] = field(default=(), compare=False)

    @property
    def cpu_throttled_source(self) -> str | None:
        """How ``cpu_throttled_pct`` was had ("bpf" or "cpu.stat"); None where it was not."""
        return self.cpu_limit.throttled_source if self.cpu_limit is not None else None

    @property
    def key(self) -> tuple[int, int]:
        """PIDs are reused: a process is (pid, start time)."""
        return (self.pid, self.start_time)

    @classmethod
    def from_dict(cls, d: Any) -> ProcessSample:
        """Rebuild a process, threads included, from its JSON object; ValueError on bad input."""
        try:
            built: ProcessSample = build(cls, d)
        except (TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"malformed process: {exc}") from None
        return built


@dataclass(frozen=True, slots=True)
class LostPart:
    """One part of a trainer's wall time over the verdict's window, for the cost of its cause.

    The parts of ``Verdict.lost_split`` sum to 100: the GPU wait, each part the cause
    took (``cause`` set), and the rest (docs/diagnosis.md, "What the cause costs").
    """

    key: str
    """``gpu``, ``cpu_wait``, ``after_gpu``, ``batches``, ``work``, ``collective``,
    ``clocks`` or ``rest``."""
    label: str
    pct: float
    cause: Cause | None = None
    """The cause that took this part; None for the parts no cause took (GPU wait, the rest)."""
    measured: bool = True
    """False where the share is inferred (a model of what removing the cause frees)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The diagnosis for one GPU: a state, its cause, the evidence with numbers, the fixes.

    ``cause`` is None where nothing holds the GPU back (``ok``, ``idle``, ``unknown``)
    and in verdicts recorded before causes existed. ``lost_pct`` is the share of the
    window's wall time the cause held the GPU's trainer back and ``speedup_max`` how much
    faster its steps could run without it (docs/diagnosis.md); None where not known.
    """

    gpu: int
    state: VerdictState
    evidence: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    efficiency: float | None = None
    cause: Cause | None = None
    lost_pct: float | None = None
    speedup_max: float | None = None
    lost_pid: int | None = None
    """The trainer whose time split ``lost_split`` is (None: the GPU's, as for clocks)."""
    lost_split: tuple[LostPart, ...] = ()


@dataclass(frozen=True, slots=True)
class Sources:
    """Which sources fed the frame and why any is off."""

    gpu: str
    sched: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything seen in one tick. Immutable; shared between threads freely."""

    t: float
    interval: float
    sources: Sources
    host: HostSample
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    seq: int = 0
    sampler_cpu_pct: float | None = None
    others: tuple[ProcessSample, ...] = field(default=(), compare=False)
    """Every other process on the host, for the TUI's list (``sched_source`` "stat": only
    its stat line, owner and command line are read, so its CPU share is all it tells);
    read only where the sampler was asked to (the TUI), and never written out."""

    def to_dict(self, *, threads: bool = False) -> dict[str, Any]:
        """The JSON object of CONTRACT.md section 2 (plus documented extras)."""
        return {
            "t": round(self.t, 3),
            "interval": self.interval,
            "seq": self.seq,
            "sampler_cpu_pct": self.sampler_cpu_pct,
            "sources": {
                "gpu": self.sources.gpu,
                "sched": self.sources.sched,
                "notes": list(self.sources.notes),
            },
            "host": _plain(self.host),
            "gpus": [_plain(g) for g in self.gpus],
            "processes": [_process_dict(p, threads) for p in self.processes],
            "verdicts": [_plain(v) for v in self.verdicts],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Frame:
        """Rebuild a frame from its JSON object; raises ValueError on bad input.

        Every field is checked against its annotation (numbers are finite numbers,
        strings are strings, lists are lists), so a frame read from an untrusted
        file can be rendered without surprises.
        """
        try:
            if not isinstance(d, dict):
                raise TypeError("a frame must be an object")
            src = d["sources"]
            if not isinstance(src, dict):
                raise TypeError("sources must be an object")
            return cls(
                t=check_value("Frame.t", float, d["t"]),
                interval=check_value("Frame.interval", float, d["interval"]),
                seq=check_value("Frame.seq", int, d.get("seq", 0)),
                sampler_cpu_pct=check_value(
                    "Frame.sampler_cpu_pct", float | None, d.get("sampler_cpu_pct")
                ),
                sources=Sources(
                    gpu=check_value("sources.gpu", str, src["gpu"]),
                    sched=check_value("sources.sched", str, src["sched"]),
                    notes=check_value("sources.notes", tuple[str, ...], src.get("notes", [])),
                ),
                host=build(HostSample, d["host"]),
                gpus=tuple(build(GpuSample, g) for g in _list(d, "gpus")),
                processes=tuple(build(ProcessSample, p) for p in _list(d, "processes")),
                verdicts=tuple(build(Verdict, v) for v in _list(d, "verdicts")),
            )
        except KeyError as exc:
            raise ValueError(f"malformed frame: missing field {exc}") from None
        except (TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"malformed frame: {exc}") from None


_SCALARS = frozenset({float, int, str, bool, type(None)})


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _plain(obj: Any, skip: str = "") -> dict[str, Any]:
    # Once per frame and process while the TUI runs (the window's store encodes every
    # frame): field names are looked up once per class, and ``skip`` is never converted.
    out: dict[str, Any] = {}
    for name in _field_names(type(obj)):
        if name == skip:
            continue
        v = getattr(obj, name)
        if type(v) in _SCALARS:
            out[name] = v
            continue
        if isinstance(v, tuple):
            v = [_plain(x) if hasattr(type(x), "__dataclass_fields__") else x for x in v]
        elif hasattr(type(v), "__dataclass_fields__"):
            v = _plain(v)
        out[name] = v
    return out


# A process that is no distributed job's rank leaves these out (they read back as null):
# most processes are none, and a snapshot holds every process of every frame.
_RANK_FIELDS = ("job_id", "rank", "world_size", "local_rank")
# Extras only a trainer or a worker waiting on the network has: left out where null.
_SPARSE_FIELDS = ("peers", "workers_time", "h2d_copy_cpu_pct", "h2d_copy_runq_pct")


def _process_dict(p: ProcessSample, threads: bool) -> dict[str, Any]:
    d = _plain(p, skip="threads")
    if p.job_id is None:
        for name in _RANK_FIELDS:
            del d[name]
    for name in _SPARSE_FIELDS:
        if d[name] is None:
            del d[name]
    if threads:
        d["threads"] = [_plain(t) for t in p.threads]
    return d


def _list(d: dict[str, Any], key: str) -> list[Any]:
    v = d.get(key, [])
    if not isinstance(v, list):
        raise TypeError(f"{key} must be a list")
    return v
