"""Host-to-device copies against a workload that knows its truth, with the real eBPF probe
(root): a real DataLoader training loop copies each batch to the GPU through the fake
``libcuda``'s ``cuMemcpyHtoDAsync_v2`` from pageable memory (the driver staging it on a
CPU, tests/fakecuda/), timing every copy itself, before its GPU wait in
``cuStreamSynchronize``. Beside a fake GPU with little work whose PCIe link runs at Gen3
of its Gen5: ``host_bound``, cause ``transfer``, ``h2d_copy_pct`` within 3 points of the
loop's own clock per probe interval, pinned memory first, the degraded link named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakecuda import build_fake_cuda
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import needs_probe, sampled
from tests.truthloop import read_steps, running_loop, span_share
from tests.truthwindow import ReadClock, Window

pytestmark = needs_probe(pytest.mark.torch)

TICK_S = 1.0
TICKS = 8
POINTS = 3.0
FIRST = 2  # the third tick: the first with the probe's numbers for the trainer


def test_a_trainer_copying_each_batch_from_pageable_memory_holds_its_gpu_back(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    cuda_lib = build_fake_cuda()
    # 8 ms copying each batch, an 8 ms GPU step, 2 ms of its own work: ~45 % in copies.
    args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda_lib), "--h2d-ms", "8"]
    args += ["--workers", "2", "--sample-cpu-ms", "0.5", "--step-ms", "8"]
    args += ["--trainer-cpu-ms", "2", "--persistent"]
    with running_loop(tmp_path, args) as (pid, out):
        gpu = FakeGpu(
            util=[30],
            sm_util=[10],
            pcie_max=(5, 16),
            pcie_gen=[3],
            pcie_rx_kb_s=[2.4e6],
            processes=[FakeProc(pid=pid, sm_pct=10)],
        )
        clock = ReadClock(probe)
        frames = sampled(tmp_path, [gpu], clock, TICKS, TICK_S)  # type: ignore[arg-type]
        steps = read_steps(out)
    for f in frames:
        print(f.t, f.sources.sched, [(v.state, v.cause) for v in f.verdicts])
    (third,) = frames[FIRST].verdicts
    assert (third.state, third.cause) == ("host_bound", "transfer"), third
    (last,) = frames[-1].verdicts
    assert (last.state, last.cause) == ("host_bound", "transfer"), last
    print(last.evidence, last.fixes)
    text = "\n".join(last.evidence)
    assert "copied batches to the GPU" in text, text
    assert "GPU 0's PCIe link ran at Gen3 x16 of its Gen5 x16 at most: below its maximum" in text
    assert last.fixes[0].startswith("DataLoader(..., pin_memory=True) and batch.to('cuda',")
    assert last.fixes[1].startswith("the PCIe link ran at Gen3 x16 of its Gen5 x16: reseat")
    assert frames[-1].gpus[0].pcie_rx_kb_s == 2.4e6
    # The copies, interval by interval, against the loop's own time inside them over the
    # probe's own intervals (stalled ones left out and named: tests/truthwindow.py).
    rows = [next((p for p in f.processes if p.pid == pid), None) for f in frames]
    got = [None if r is None else r.h2d_copy_pct for r in rows]
    assert all(g is not None for g in got[FIRST:]), rows
    assert all(s.copy_ns for s in steps[1:]), "the loop records each copy"

    def copying(a: float, b: float) -> float:
        return span_share(
            ((s.copy_start, s.copy_start + s.copy_ns / 1e9, s.copy_ns) for s in steps), a, b
        )

    copies = Window(clock.reads, [s.step_end for s in steps], TICK_S).compare(
        "h2d_copy_pct", got, copying, FIRST
    )
    _, truth = copies.means()
    assert truth >= 30.0, truth
    print(copies.within(POINTS))
    # The copies ran on a CPU (the fake stages them spinning) and are not the trainer's own
    # work: what it did on a CPU outside them and the GPU wait is its 2 ms a step and next().
    last_row = rows[-1]
    assert last_row is not None and last_row.h2d_copy_cpu_pct is not None
    assert last_row.h2d_copy_cpu_pct >= 0.8 * (last_row.h2d_copy_pct or 0.0), last_row
    own = 100.0 - (last_row.offcpu_pct or 0.0) - last_row.h2d_copy_cpu_pct
    assert own < 25.0, (own, last_row)
