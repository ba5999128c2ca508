"""The window's aggregates: each GPU, the host and every process averaged over the frames.

The diagnosis reads these, never single frames. A process is averaged over the
ticks it was seen in (its first sighting, which has no rates yet, left out);
``job.py`` groups them by the GPU they work for.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    NetPeer,
    OpenStorage,
    Preemptor,
    ProcessSample,
    Role,
)

T = TypeVar("T")

# Clock-event reasons that do not slow a busy GPU down (NVML reports them as
# "reasons" too, but they are the GPU idling or following a setting).
BENIGN_CLOCK_REASONS = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost", "none"}
)


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the known values (None: none known)."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


# gputop's own processes, by module: the command and the probe's compile child. The demo's
# workload (gputop.demo.workload) is the job a demo shows, not gputop's overhead.
_GPUTOP_MODULES = frozenset({"gputop", "gputop.__main__", "gputop.sources.bpf_child"})


@functools.lru_cache(maxsize=4096)
def is_gputop(comm: str, cmdline: str) -> bool:
    """Whether a process is gputop itself (never a culprit to act on).

    Told by its command line, so a recorded frame read back later says the same:
    the ``gputop`` console script, or an interpreter running ``-m gputop`` (or the
    probe's child module) or the script.
    """
    argv = cmdline.split()
    if comm == "gputop" or (argv and os.path.basename(argv[0]) == "gputop"):
        return True
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return False
    rest = argv[1:]
    for i, arg in enumerate(rest):
        if arg == "-m":
            return i + 1 < len(rest) and rest[i + 1] in _GPUTOP_MODULES
        if arg == "-c":
            return False
        if not arg.startswith("-"):
            return os.path.basename(arg) == "gputop"
    return False


def runq_weight(runq_pct: float | None, runq_threads_pct: float | None) -> float:
    """The run-queue time a process's preemptor shares are a share of (all its threads)."""
    if runq_threads_pct is not None:
        return runq_threads_pct
    return runq_pct or 0.0


# Preemptors a window's aggregate keeps (each frame records a process's top 5; over a
# window others rotate in): enough that the evidence can say who took nearly all of a wait.
WHO_TOOK_KEPT = 10


def merge_preemptors(
    weighted: Iterable[tuple[float, tuple[Preemptor, ...] | None]], top: int = 5
) -> tuple[Preemptor, ...] | None:
    """Preemptor lists merged, each weighted (by the run-queue time it is a share of).

    None when no list was measured; shares of the merged list are % of the total weight.
    """
    acc: dict[int, float] = {}
    comm: dict[int, str] = {}
    kernel: dict[int, bool] = {}
    total = 0.0
    measured = False
    for weight, ps in weighted:
        if ps is None:
            continue
        measured = True
        w = max(0.0, weight)
        total += w
        for p in ps:
            acc[p.pid] = acc.get(p.pid, 0.0) + w * p.share_pct / 100.0
            comm[p.pid] = p.comm
            kernel[p.pid] = p.kernel
    if not measured:
        return None
    if total <= 0:
        return ()
    ranked = sorted(acc, key=lambda pid: -acc[pid])[:top]
    return tuple(
        Preemptor(pid, comm[pid], round(100.0 * acc[pid] / total, 1), kernel[pid]) for pid in ranked
    )


@dataclass(frozen=True, slots=True)
class LimitAgg:
    """A cgroup CPU limit and what its ``cpu.stat`` counted over the window."""

    cgroup: str
    quota_cpus: float
    limit_file: str
    burst_cpus: float | None
    periods: int
    """CFS periods over the ticks its counters were read (0: not read yet)."""
    throttled_periods: int
    throttled_ms: float

    @property
    def throttled_periods_pct(self) -> float | None:
        """The share of periods in which the kernel throttled it; None before any were counted."""
        return 100.0 * self.throttled_periods / self.periods if self.periods else None


def _limit_agg(ps: list[ProcessSample]) -> LimitAgg | None:
    last = ps[-1].cpu_limit
    quota = ps[-1].cpu_quota
    if last is None or quota is None:
        return None
    counted = [
        p.cpu_limit
        for p in ps
        if p.cpu_limit is not None
        and p.cpu_limit.cgroup == last.cgroup
        and p.cpu_limit.periods is not None
    ]
    return LimitAgg(
        cgroup=last.cgroup,
        quota_cpus=quota,
        limit_file=last.file,
        burst_cpus=last.burst,
        periods=sum(c.periods or 0 for c in counted),
        throttled_periods=sum(c.throttled_periods or 0 for c in counted),
        throttled_ms=sum(c.throttled_ms or 0.0 for c in counted),
    )


def _seen(lists: Iterable[tuple[T, ...] | None]) -> tuple[tuple[T, int], ...] | None:
    """Each item of the lists with the ticks it was seen in, most first; None: none read."""
    seen: dict[T, int] = {}
    read = False
    for items in lists:
        if items is None:
            continue
        read = True
        for s in items:
            seen[s] = seen.get(s, 0) + 1
    if not read:
        return None
    return tuple(sorted(seen.items(), key=lambda kv: -kv[1]))


def _storage_seen(ps: list[ProcessSample]) -> tuple[tuple[OpenStorage, int], ...] | None:
    return _seen(p.storage for p in ps)


@dataclass(frozen=True, slots=True)
class ProcAgg:
    """One process averaged over the window (only ticks where it was seen)."""

    pid: int
    comm: str
    role: Role
    trainer_pid: int | None
    gpus: tuple[int, ...]
    cpu_pct: float
    offcpu_pct: float | None
    runq_pct: float | None
    preempt_per_s: float
    wait_input_pct: float | None = None
    wait_thread_pct: float | None = None
    wait_irq_pct: float | None = None
    wait_other_pct: float | None = None
    preemptors: tuple[Preemptor, ...] | None = None
    cpus_allowed: tuple[int, ...] | None = None
    cpu_quota: float | None = None
    runq_after_input_pct: float | None = None
    gpu_sync_pct: float | None = None
    gpu_sync_spin_pct: float | None = None
    gpu_sync_runq_pct: float | None = None
    h2d_copy_pct: float | None = None
    """Inside host-to-device copies (measured where its libcuda is probed)."""
    h2d_copy_cpu_pct: float | None = None
    h2d_copy_runq_pct: float | None = None
    runq_threads_pct: float | None = None
    """All its threads waiting for a CPU, % of the interval (the base of its preemptors' shares)."""
    cpu_throttled_pct: float | None = None
    """Of ``runq_pct``: held back by its cgroup's CPU limit."""
    io_wait_pct: float | None = None
    """Of the blocked time: in uninterruptible sleep (mostly disk I/O)."""
    net_wait_pct: float | None = None
    """Of the blocked time: until network receive processing woke it (a remote peer's data)."""
    peers: tuple[tuple[NetPeer, int], ...] | None = None
    """Its TCP peers while it waited on the network, with the ticks each was seen in (most
    first); None: never read in the window."""
    cpu_throttled_source: str | None = None
    """"bpf" (measured) or "cpu.stat" (inferred); None: not told."""
    limit: LimitAgg | None = None
    """Its cgroup CPU limit with the kernel's throttling counters summed over the window."""
    storage: tuple[tuple[OpenStorage, int], ...] | None = None
    """What it had open for reading while in I/O wait, with the ticks each was seen in
    (most first); None: never read in the window (not in D state at any tick's scan)."""
    gputop: bool = False
    """It is gputop itself."""
    wait_collective_pct: float | None = None
    """Blocked until its collective-communication threads woke it: waiting for other ranks."""
    job_id: str | None = None
    rank: int | None = None
    world_size: int | None = None

    @property
    def measured(self) -> bool:
        """Whether the wait split was measured (eBPF) rather than unknown (/proc alone)."""
        return self.wait_input_pct is not None

    @property
    def gpu_measured(self) -> bool:
        """Whether its wait for the GPU was measured (its libcuda probed)."""
        return self.gpu_sync_pct is not None

    @property
    def blocked_pct(self) -> float | None:
        """Share of the time asleep (off-CPU but not waiting for a CPU)."""
        if self.offcpu_pct is None:
            return None
        return max(0.0, self.offcpu_pct - (self.runq_pct or 0.0))

    @property
    def data_wait_pct(self) -> float | None:
        """Waiting for batches: blocked until the input pipeline woke it, then for a CPU."""
        if self.wait_input_pct is None:
            return None
        return self.wait_input_pct + (self.runq_after_input_pct or 0.0)

    @property
    def cpu_wait_pct(self) -> float | None:
        """Waiting for a CPU, outside CUDA synchronization and not right after a batch."""
        if self.runq_pct is None:
            return None
        rest = (self.gpu_sync_runq_pct or 0.0) + (self.runq_after_input_pct or 0.0)
        return max(0.0, self.runq_pct - rest)

    @property
    def host_wait_pct(self) -> float | None:
        """Run queue plus waiting for batches (measured), the host's share of its time.

        Time inside a CUDA synchronization call is waiting for the GPU whatever the
        thread did there, so its run-queue part is not the host's.
        """
        if self.wait_input_pct is None:
            return None
        return max(0.0, (self.runq_pct or 0.0) - (self.gpu_sync_runq_pct or 0.0)) + (
            self.wait_input_pct
        )

    @property
    def work_pct(self) -> float | None:
        """On a CPU outside CUDA synchronization and host-to-device copies (its own work,
        loading batches included)."""
        if self.offcpu_pct is None:
            return None
        inside = (self.gpu_sync_spin_pct or 0.0) + (self.h2d_copy_cpu_pct or 0.0)
        return max(0.0, 100.0 - self.offcpu_pct - inside)


@dataclass(frozen=True, slots=True)
class GpuAgg:
    """One GPU averaged over the window."""

    index: int
    frames: int
    seconds: float
    util: float | None
    sm_active: float | None
    power_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    throttle_share_pct: float
    throttle_reasons: tuple[str, ...]
    lost: bool
    temperature_c: float | None
    sm_clock_mhz: float | None
    sm_clock_max_mhz: int | None
    pcie_gen: int | None = None
    """The highest PCIe generation the link ran at in the window (it trains down while idle,
    and up to what it can while copying)."""
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    """The widest the link ran in the window (lanes)."""
    pcie_width_max: int | None = None
    pcie_rx_kb_s: float | None = None
    """Mean PCIe throughput into the GPU over the window, KB/s."""

    @property
    def pcie_degraded(self) -> bool:
        """The link never reached its maximum generation or width in the window."""
        return (
            self.pcie_gen is not None
            and self.pcie_gen_max is not None
            and self.pcie_width is not None
            and self.pcie_width_max is not None
            and (self.pcie_gen < self.pcie_gen_max or self.pcie_width < self.pcie_width_max)
        )


@dataclass(frozen=True, slots=True)
class HostAgg:
    """The host averaged over the window."""

    cpu_pct: float
    ncpu: int
    load1: float
    procs_running: float
    psi_cpu_some: float | None
    psi_io_some: float | None = None
    cpus_online: tuple[int, ...] = ()
    per_cpu_pct: tuple[float, ...] = ()


def aggregate_host(frames: Iterable[Frame]) -> HostAgg:
    """Mean host numbers over these frames (the newest frame's CPU count)."""
    hosts: list[HostSample] = [f.host for f in frames]
    last = hosts[-1]
    same = [h.per_cpu_pct for h in hosts if len(h.per_cpu_pct) == len(last.per_cpu_pct)]
    per_cpu = tuple(sum(col) / len(same) for col in zip(*same, strict=True)) if same else ()
    return HostAgg(
        cpu_pct=sum(h.cpu_pct for h in hosts) / len(hosts),
        ncpu=last.ncpu,
        load1=last.load1,
        procs_running=sum(h.procs_running for h in hosts) / len(hosts),
        psi_cpu_some=mean(h.psi_cpu_some for h in hosts),
        psi_io_some=mean(h.psi_io_some for h in hosts),
        cpus_online=last.cpus_online or tuple(range(last.ncpu)),
        per_cpu_pct=per_cpu,
    )


def aggregate_gpu(frames: Iterable[Frame], index: int) -> GpuAgg:
    """Mean GPU numbers for GPU ``index`` over these frames."""
    samples: list[GpuSample] = []
    seconds = 0.0
    for f in frames:
        for g in f.gpus:
            if g.index == index:
                samples.append(g)
                seconds += f.interval
    slowing = [tuple(r for r in g.throttle if r not in BENIGN_CLOCK_REASONS) for g in samples]
    reasons: dict[str, int] = {}
    for rs in slowing:
        for r in rs:
            reasons[r] = reasons.get(r, 0) + 1
    last = samples[-1] if samples else None
    return GpuAgg(
        index=index,
        frames=len(samples),
        seconds=seconds,
        util=mean(g.util for g in samples),
        sm_active=mean(g.sm_active for g in samples),
        power_pct=mean(g.power_pct for g in samples),
        power_w=mean(g.power_w for g in samples),
        power_limit_w=None if last is None else last.power_limit_w,
        throttle_share_pct=100.0 * sum(1 for rs in slowing if rs) / len(samples)
        if samples
        else 0.0,
        throttle_reasons=tuple(sorted(reasons, key=lambda r: -reasons[r])),
        lost=last is not None and last.state == "lost",
        temperature_c=mean(g.temperature_c for g in samples),
        sm_clock_mhz=mean(
            None if g.sm_clock_mhz is None else float(g.sm_clock_mhz) for g in samples
        ),
        sm_clock_max_mhz=None if last is None else last.sm_clock_max_mhz,
        pcie_gen=max((g.pcie_gen for g in samples if g.pcie_gen is not None), default=None),
        pcie_gen_max=None if last is None else last.pcie_gen_max,
        pcie_width=max((g.pcie_width for g in samples if g.pcie_width is not None), default=None),
        pcie_width_max=None if last is None else last.pcie_width_max,
        pcie_rx_kb_s=mean(g.pcie_rx_kb_s for g in samples),
    )


def aggregate_processes(frames: Iterable[Frame]) -> dict[int, ProcAgg]:
    """Every process seen in these frames, averaged over the ticks it was seen."""
    seen: dict[int, list[ProcessSample]] = {}
    for f in frames:
        for p in f.processes:
            seen.setdefault(p.pid, []).append(p)
    out: dict[int, ProcAgg] = {}
    for pid, ps_all in seen.items():
        last = ps_all[-1]
        # A process's first sighting has no rates yet (its CPU share reads 0): leave it out.
        ps = [p for p in ps_all if p.offcpu_pct is not None] or ps_all
        out[pid] = ProcAgg(
            pid=pid,
            comm=last.comm,
            role=last.role,
            trainer_pid=last.trainer_pid,
            gpus=tuple(sorted({g for p in ps_all for g in p.gpus})),
            cpu_pct=sum(p.cpu_pct for p in ps) / len(ps),
            offcpu_pct=mean(p.offcpu_pct for p in ps),
            runq_pct=mean(p.runq_pct for p in ps),
            preempt_per_s=sum(p.preempt_per_s for p in ps) / len(ps),
            wait_input_pct=mean(p.wait_input_pct for p in ps),
            wait_thread_pct=mean(p.wait_thread_pct for p in ps),
            wait_irq_pct=mean(p.wait_irq_pct for p in ps),
            wait_other_pct=mean(p.wait_other_pct for p in ps),
            preemptors=merge_preemptors(
                ((runq_weight(p.runq_pct, p.runq_threads_pct), p.preemptors) for p in ps),
                top=WHO_TOOK_KEPT,
            ),
            cpus_allowed=last.cpus_allowed,
            cpu_quota=last.cpu_quota,
            runq_after_input_pct=mean(p.runq_after_input_pct for p in ps),
            gpu_sync_pct=mean(p.gpu_sync_pct for p in ps),
            gpu_sync_spin_pct=mean(p.gpu_sync_spin_pct for p in ps),
            gpu_sync_runq_pct=mean(p.gpu_sync_runq_pct for p in ps),
            h2d_copy_pct=mean(p.h2d_copy_pct for p in ps),
            h2d_copy_cpu_pct=mean(p.h2d_copy_cpu_pct for p in ps),
            h2d_copy_runq_pct=mean(p.h2d_copy_runq_pct for p in ps),
            runq_threads_pct=mean(p.runq_threads_pct for p in ps),
            cpu_throttled_pct=mean(p.cpu_throttled_pct for p in ps),
            io_wait_pct=mean(p.io_wait_pct for p in ps),
            net_wait_pct=mean(p.net_wait_pct for p in ps),
            cpu_throttled_source=next(
                (p.cpu_throttled_source for p in reversed(ps) if p.cpu_throttled_source), None
            ),
            limit=_limit_agg(ps_all),
            storage=_storage_seen(ps_all),
            peers=_seen(p.peers for p in ps_all),
            gputop=is_gputop(last.comm, last.cmdline),
            wait_collective_pct=mean(p.wait_collective_pct for p in ps),
            job_id=last.job_id,
            rank=last.rank,
            world_size=last.world_size,
        )
    return out
