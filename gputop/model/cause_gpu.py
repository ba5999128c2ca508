"""Cause families on the GPU: its clocks slowed down, or its own kernels do little work.

``real_work_low`` decides whether a busy GPU does little real work (SM activity,
else power against its limit). When the host side is clear, the GPU side is the
cause (``low_sm_efficiency``); slowing clock-event reasons make it ``throttled``.
"""

from __future__ import annotations

from gputop.model.causes import Judgement
from gputop.model.hostside import HostSide
from gputop.model.thresholds import Thresholds
from gputop.model.window import GpuAgg, HostAgg
from gputop.model.wording import BUILDS_OWN, NOT_MEASURED, gpu_wait_text, pct, whole


def real_work_low(gpu: GpuAgg, t: Thresholds) -> tuple[bool | None, str]:
    """Whether real work is low (SM activity, else power share), and the line that says so."""
    if gpu.sm_active is not None:
        return (
            gpu.sm_active < t.sm_low_pct,
            f"SM activity {whole(gpu.sm_active)}% is far below GPU_UTIL {whole(gpu.util or 0)}%:"
            " kernels are resident but most SMs do no work",
        )
    if gpu.power_pct is not None:
        return (
            gpu.power_pct < t.power_low_pct,
            f"SM activity n/a; power {whole(gpu.power_pct)}% of the limit is low for a GPU"
            f" that is {whole(gpu.util or 0)}% busy",
        )
    return None, ""


def throttled(gpu: GpuAgg, gpu_line: str, secs: str) -> Judgement:
    """Slowing clock-event reasons on a busy GPU: which, how often, and what to check."""
    reasons = ", ".join(gpu.throttle_reasons) or "clock events"
    ev = [
        gpu_line,
        f"clock-event reasons {reasons} active {whole(gpu.throttle_share_pct)}% of the last"
        f" {secs} s",
    ]
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        ev.append(f"SM clock {whole(gpu.sm_clock_mhz)} of {gpu.sm_clock_max_mhz} MHz")
    if gpu.temperature_c is not None:
        ev.append(f"temperature {whole(gpu.temperature_c)} C")
    fixes: list[str] = []
    if any("thermal" in r for r in gpu.throttle_reasons):
        fixes.append(
            "thermal: check airflow, fans and inlet temperature (`nvidia-smi -q -d TEMPERATURE`)"
        )
    if any("power" in r for r in gpu.throttle_reasons):
        fixes.append(
            "power cap: check `nvidia-smi -q -d POWER`; raise the limit with `nvidia-smi -pl W`"
            " if within spec, or accept the lower clocks"
        )
    fixes.append("see every reason with `nvidia-smi -q -d PERFORMANCE`")
    return Judgement("throttled", tuple(ev), tuple(fixes), "clocks")


def gpu_side(gpu_line: str, real_line: str, hs: HostSide, host: HostAgg, secs: str) -> Judgement:
    """Little real work and the host side clear: the kernels themselves are the cause."""
    return Judgement(
        "low_sm_efficiency",
        (gpu_line, real_line, _no_host_cause_line(hs, host, secs)),
        (
            "the GPU side is the cause: its kernels are memory- or communication-bound;"
            " profile them (torch.profiler, Nsight Compute)",
            "raise arithmetic intensity: larger batches, bf16/fp16 autocast,"
            " fused kernels (torch.compile)",
            "multi-GPU jobs: check the links (NCCL_DEBUG=INFO, `nvidia-smi topo -m`)",
        ),
        "gpu_side",
    )


def _no_host_cause_line(hs: HostSide, host: HostAgg, secs: str) -> str:
    p = hs.trainer
    if p is None:
        return (
            "the GPU's processes are not visible here (containers?): the host side cannot"
            " be judged, so none is blamed"
        )
    if hs.measured:
        gpu = f" {gpu_wait_text(p)} of the last {secs} s, and" if p.gpu_measured else ""
        span = "" if p.gpu_measured else f" of the last {secs} s"
        if hs.builds_own:
            waited = (
                f" {BUILDS_OWN}: on a CPU {pct(p.work_pct)}{span}, waited for a CPU"
                f" {pct(p.cpu_wait_pct)}"
            )
        else:
            waited = (
                f" waited for batches {pct(p.data_wait_pct)} and for a CPU"
                f" {pct(p.cpu_wait_pct)}{span}"
            )
        return (
            f"the host is not what holds the GPU back: trainer pid {p.pid}{gpu}{waited}"
            f" (measured); CPUs {whole(host.cpu_pct)}% busy"
        )
    wk = hs.workers
    workers = "" if wk is None else f", its workers {pct(wk.runq_pct)}"
    # Without workers it makes its batches on a CPU: asleep, it waits on its GPU or storage.
    on = "its storage" if hs.builds_own else "its batches"
    return (
        f"no host-side cause seen: trainer pid {p.pid} waits for a CPU {pct(p.runq_pct)}"
        f"{workers}; asleep {pct(p.blocked_pct)} (on its GPU or {on}: {NOT_MEASURED});"
        f" CPUs {whole(host.cpu_pct)}% busy"
    )
