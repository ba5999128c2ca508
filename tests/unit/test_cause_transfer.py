"""Cause transfer: a trainer that copies its batches to the GPU from pageable memory (measured
inside the driver's host-to-device copies), with pinned memory first and a degraded PCIe link
named where it never reached its maximum."""

from __future__ import annotations

from gputop.model.diagnosis import classify
from gputop.model.lost import lost_time
from gputop.model.thresholds import Thresholds
from gputop.model.window import GpuAgg
from gputop.widgets.gpu_panel import pcie_text
from tests.aggregates import TRAINER, gpu, host, job, trainer, worker

T = Thresholds()

# 44% inside copies (36 on a CPU staging, 2 queued, 6 waiting for the DMA), 30% GPU wait.
COPYING = dict(
    cpu_pct=60.0, offcpu_pct=40.0, runq_pct=3.0, wait_input_pct=2.0, wait_irq_pct=0.0,
    gpu_sync_pct=30.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=0.0, h2d_copy_pct=44.0,
    h2d_copy_cpu_pct=36.0, h2d_copy_runq_pct=2.0,
)  # fmt: skip
FAST = worker(4000, cpu_pct=6.0, offcpu_pct=94.0, runq_pct=0.2, io_wait_pct=0.0)


def _gpu(**kw: object) -> GpuAgg:
    return gpu(util=30.0, sm=10.0, **kw)


def test_a_trainer_copying_from_pageable_memory_is_host_bound_by_its_transfers() -> None:
    j = job(trainer(**COPYING), FAST)
    g = _gpu(pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16, pcie_rx_kb_s=2.4e6)
    v = classify(g, host(), j, T)
    assert (v.state, v.cause) == ("host_bound", "transfer"), v
    assert v.evidence[1] == (
        f"trainer pid {TRAINER} copied batches to the GPU 44% of the last 10 s (inside the"
        " driver's host-to-device copies: on a CPU 36%, staging pageable memory, waiting for a"
        " CPU 2%, for the copy 6%; measured)"
    )
    assert (
        v.evidence[2]
        == "GPU 0's PCIe link ran at Gen5 x16 of its Gen5 x16; 2.4 GB/s into the GPU on average"
    )
    assert v.fixes[0].startswith("DataLoader(..., pin_memory=True) and batch.to('cuda',")
    assert not any("reseat" in f for f in v.fixes), "a link at its maximum is not blamed"
    # Its copies are not its own work: 24% on a CPU outside them and the GPU wait.
    lost = lost_time(v.cause, j, host(), g)
    assert lost is not None and [x.key for x in lost.split if x.cause] == ["h2d"]
    assert lost.pct == 44.0


def test_a_link_that_never_reached_its_maximum_is_named_after_pinned_memory() -> None:
    g = _gpu(pcie_gen=3, pcie_gen_max=5, pcie_width=16, pcie_width_max=16)
    v = classify(g, host(), job(trainer(**COPYING), FAST), T)
    assert v.cause == "transfer"
    assert "ran at Gen3 x16 of its Gen5 x16 at most: below its maximum" in v.evidence[2]
    assert v.fixes[1].startswith("the PCIe link ran at Gen3 x16 of its Gen5 x16: reseat the GPU")


def test_copies_below_the_threshold_or_unmeasured_are_no_transfer_cause() -> None:
    few = {**COPYING, "h2d_copy_pct": 10.0, "h2d_copy_cpu_pct": 8.0, "offcpu_pct": 60.0}
    v = classify(_gpu(), host(), job(trainer(**few), FAST), T)
    assert v.cause != "transfer", v
    unmeasured = {k: v for k, v in COPYING.items() if not k.startswith(("h2d", "gpu_sync"))}
    v = classify(_gpu(), host(), job(trainer(**unmeasured), FAST), T)
    assert v.cause != "transfer", v


def test_the_gpu_panel_shows_the_link_against_its_maximum_and_marks_a_lower_one() -> None:
    from dataclasses import replace

    from tests.frames_fixture import make_frames

    g = make_frames(1)[0].gpus[0]
    assert pcie_text(replace(g, pcie_gen=None)) is None
    link = replace(
        g, pcie_gen=4, pcie_width=16, pcie_gen_max=5, pcie_width_max=16, pcie_rx_kb_s=2.4e6,
        pcie_tx_kb_s=1.0e5,
    )  # fmt: skip
    assert pcie_text(link) == ("PCIe Gen4 x16/Gen5 x16 ↓2.4 GB/s ↑0.1 GB/s", True)
    full = replace(link, pcie_gen=5, pcie_rx_kb_s=None, pcie_tx_kb_s=None)
    assert pcie_text(full) == ("PCIe Gen5 x16/Gen5 x16", False)
