"""Cause ``transfer``: the trainer copies its batches to the GPU from pageable memory.

A tensor's ``.to("cuda")`` from pageable host memory (a DataLoader without
``pin_memory=True``) is staged by the driver through pinned memory on the trainer's own
thread, which waits for the copy (measured: time inside the driver's host-to-device copy
entry points, ``h2d_copy_pct``). The GPU idles meanwhile. The fixes pin the batches and
make the copy asynchronous; where the PCIe link ran below its maximum generation or width
through the window (it trains up to what it can while copying), the degraded link is
named too.
"""

from __future__ import annotations

from gputop.model.causes import Judgement
from gputop.model.hostside import HostSide
from gputop.model.job import Job
from gputop.model.thresholds import Thresholds
from gputop.model.window import GpuAgg, ProcAgg
from gputop.model.wording import pct


def copying_trainer(job: Job, t: Thresholds) -> ProcAgg | None:
    """The trainer inside host-to-device copies ``transfer_pct`` of the time or more (measured);
    of several, the one that copies most."""
    copying = [p for p in job.trainers if (p.h2d_copy_pct or 0.0) >= t.transfer_pct]
    return max(copying, key=lambda p: p.h2d_copy_pct or 0.0, default=None)


def link_text(gpu: GpuAgg) -> str | None:
    """``Gen4 x16 of its Gen5 x16``: the link the GPU ran at against its maximum; None: n/a."""
    if gpu.pcie_gen is None or gpu.pcie_width is None:
        return None
    text = f"Gen{gpu.pcie_gen} x{gpu.pcie_width}"
    if gpu.pcie_gen_max is not None and gpu.pcie_width_max is not None:
        text += f" of its Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}"
    return text


def _rate(kb_s: float) -> str:
    return f"{kb_s / 1e6:.1f} GB/s" if kb_s >= 1e5 else f"{kb_s / 1e3:.0f} MB/s"


def pcie_line(gpu: GpuAgg) -> str | None:
    """The GPU's PCIe link over the window, and the throughput into it."""
    link = link_text(gpu)
    if link is None:
        return None
    line = f"GPU {gpu.index}'s PCIe link ran at {link}"
    if gpu.pcie_degraded:
        line += " at most: below its maximum"
    if gpu.pcie_rx_kb_s is not None:
        line += f"; {_rate(gpu.pcie_rx_kb_s)} into the GPU on average"
    return line


def transfer(p: ProcAgg, gpu: GpuAgg, hs: HostSide, gpu_line: str, secs: str) -> Judgement:
    """The GPU waits while its trainer copies batches to it from pageable memory (measured)."""
    copy = p.h2d_copy_pct or 0.0
    on_cpu = p.h2d_copy_cpu_pct or 0.0
    queued = p.h2d_copy_runq_pct or 0.0
    lines = [
        gpu_line,
        f"trainer pid {p.pid} copied batches to the GPU {pct(copy)} of the last {secs} s (inside"
        f" the driver's host-to-device copies: on a CPU {pct(on_cpu)}, staging pageable memory,"
        f" waiting for a CPU {pct(queued)}, for the copy {pct(max(0.0, copy - on_cpu - queued))};"
        " measured)",
    ]
    link = pcie_line(gpu)
    if link is not None:
        lines.append(link)
    lines.extend(hs.lines[1:])
    fixes = [
        "DataLoader(..., pin_memory=True) and batch.to('cuda', non_blocking=True): pinned"
        " batches are copied by DMA without the driver staging them on a CPU, and the copy"
        " overlaps the GPU's work",
    ]
    if gpu.pcie_degraded:
        fixes.append(
            f"the PCIe link ran at {link_text(gpu)}: reseat the GPU, check the BIOS PCIe"
            " setting (link speed, ASPM) and any riser or retimer; `nvidia-smi -q -d PCIE`"
            " shows the link"
        )
    fixes += [
        "copy fewer bytes: keep images uint8 until they are on the GPU and convert there"
        " (a quarter of float32's bytes)",
        f"see where it copies: Enter on pid {p.pid}, then y for its Python stack",
    ]
    return Judgement("host_bound", tuple(lines), tuple(fixes), "transfer")
