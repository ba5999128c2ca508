"""The modelled GPU of the demos: turns the workload's real progress into NVML-like numbers.

Pure functions, no I/O. The model reproduces how GPU_UTIL lies (docs/demo.md):

* GPU_UTIL is the share of time any kernel is queued on the GPU. A training step
  keeps a kernel resident from its first launch until the step's work is done, so
  a trainer that is descheduled halfway through launching its kernels leaves the
  GPU "busy" while it computes nothing.
* SM activity is the share of time kernels actually compute, times the share of
  the SMs those kernels fill (memory-bound kernels fill few).
* Power follows SM (and DRAM) activity; a kernel mix that would draw more than the
  power limit is capped at the limit and its clocks are lowered in proportion,
  which slows the kernels down (the workload is told the lower clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gputop.demo.progress import Progress
from gputop.model.frame import GpuProcess, GpuReading, GpuSample


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The fixed facts of the modelled board (numbers of an H100 SXM)."""

    name: str = "NVIDIA H100 80GB HBM3 (gputop demo model)"
    uuid: str = "GPU-00000000-0000-4000-8000-0000000de300"
    power_limit_w: float = 700.0
    idle_power_w: float = 70.0
    resident_power_w: float = 40.0
    """Extra draw of kernels that are resident but not computing (spinning, waiting)."""
    sm_clock_max_mhz: int = 1980
    sm_clock_idle_mhz: int = 345
    mem_total_mib: int = 81559
    job_mem_mib: int = 61440
    idle_temp_c: float = 34.0
    temp_per_w: float = 0.072
    """Steady-state degrees above idle per watt above idle."""


def board(spec: GpuSpec, index: int) -> GpuSpec:
    """The node's GPU ``index``: the same board under its own UUID (GPU 0 keeps ``spec``'s)."""
    return replace(spec, uuid=f"{spec.uuid[:-2]}{index:02x}") if index else spec


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """What the workload's kernels do while they compute."""

    sm_fill: float
    """Share of SM capacity a computing kernel keeps busy (0-1)."""
    dram_fill: float
    """Share of DRAM bandwidth a computing kernel uses (0-1)."""
    full_power_w: float
    """Board power the kernels would draw computing 100% of the time at full clocks."""


def clock_ratio(spec: GpuSpec, profile: KernelProfile) -> float:
    """Clock as a share of the maximum when the kernels compute flat out (1.0 = no cap)."""
    if profile.full_power_w <= spec.power_limit_w:
        return 1.0
    return (spec.power_limit_w - spec.idle_power_w) / (profile.full_power_w - spec.idle_power_w)


def model_sample(
    spec: GpuSpec,
    profile: KernelProfile,
    *,
    index: int,
    dt_s: float,
    busy_s: float,
    compute_s: float,
    has_job: bool,
) -> GpuSample:
    """One GPU sample from what happened during ``dt_s`` seconds of the workload.

    ``busy_s`` is time with a kernel queued, ``compute_s`` time kernels computed
    (at the capped clock, when capped); both come from the workload's progress.
    """
    dt = max(dt_s, 1e-6)
    busy = min(1.0, max(0.0, busy_s / dt))
    compute = min(busy, max(0.0, compute_s / dt))
    ratio = clock_ratio(spec, profile)
    sm_active = 100.0 * compute * profile.sm_fill
    dram_active = 100.0 * compute * profile.dram_fill
    # Power while computing: the capped draw when the mix exceeds the limit.
    compute_w = min(profile.full_power_w, spec.power_limit_w)
    power = (
        spec.idle_power_w
        + (compute_w - spec.idle_power_w) * compute
        + spec.resident_power_w * (busy - compute)
    )
    capped = ratio < 1.0 and compute > 0.5
    throttle = ("sw_power_cap",) if capped else (() if busy > 0.0 else ("gpu_idle",))
    if busy > 0.05:
        clock = round(spec.sm_clock_max_mhz * (ratio if capped else 1.0))
    else:
        clock = spec.sm_clock_idle_mhz
    return GpuSample(
        index=index,
        uuid=spec.uuid,
        name=spec.name,
        util=round(100.0 * busy, 1),
        sm_active=round(sm_active, 1),
        sm_source="demo",
        power_w=round(power, 1),
        power_limit_w=spec.power_limit_w,
        mem_used_mib=spec.job_mem_mib if has_job else 0,
        mem_total_mib=spec.mem_total_mib,
        throttle=throttle,
        mem_util=round(dram_active, 1),
        sm_occupancy=round(sm_active * 0.8, 1),
        tensor_active=round(sm_active * 0.6, 1),
        dram_active=round(dram_active, 1),
        temperature_c=round(spec.idle_temp_c + spec.temp_per_w * (power - spec.idle_power_w), 1),
        sm_clock_mhz=clock,
        sm_clock_max_mhz=spec.sm_clock_max_mhz,
        power_avg_w=round(power, 1),
    )


def model_node(
    spec: GpuSpec,
    profile: KernelProfile,
    then: tuple[int, Sequence[Progress]],
    now: tuple[int, Sequence[Progress]],
) -> GpuReading:
    """The node's modelled GPUs between two readings of the ranks' progress (``(monotonic ns,
    progress of each rank)``): GPU ``r`` is driven by rank ``r``'s progress alone and runs
    its trainer."""
    t0, prev = then
    t1, cur = now
    gpus = tuple(
        model_sample(
            board(spec, index),
            profile,
            index=index,
            dt_s=(t1 - t0) / 1e9,
            busy_s=(c.busy_ns(t1) - p.busy_ns(t0)) / 1e9,
            compute_s=(c.compute_ns(t1) - p.compute_ns(t0)) / 1e9,
            has_job=True,
        )
        for index, (p, c) in enumerate(zip(prev, cur, strict=True))
    )
    procs = tuple(
        GpuProcess(
            pid=c.trainer_pid, gpu_index=g.index, gpu_mem_mib=spec.job_mem_mib, sm_pct=g.sm_active
        )
        for c, g in zip(cur, gpus, strict=True)
    )
    return GpuReading(gpus=gpus, processes=procs)
