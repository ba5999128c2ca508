"""A job boxed into one CPU beside an idle one, with the real eBPF probe (root): a real
PyTorch DataLoader loop pinned to CPU 0 (as a launcher's or a container's affinity would:
its workers inherit it), whose 2 workers need 40 ms of CPU per batch against a 20 ms step,
on a 2-CPU host whose other CPU sits idle, beside a fake GPU busy with little real work.
``busy_but_starving``, cause ``cpu_contention``: the evidence names the set (CPU 0) and the
idle CPU, and the first fix widens the set; no fix says to run fewer workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import needs_probe, sampled
from tests.truthloop import running_loop

pytestmark = needs_probe(pytest.mark.torch)

TICKS = 8


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_job_pinned_to_one_cpu_beside_an_idle_one_is_told_to_widen_its_set(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    box, idle = sorted(os.sched_getaffinity(0))[:2]
    args = ["--standin", "sleep", "--workers", "2", "--sample-cpu-ms", "10", "--batch-size", "4"]
    args += ["--step-ms", "20", "--persistent", "--cpu", str(box)]
    with running_loop(tmp_path, args) as (pid, _):
        gpu = FakeGpu(util=[97], sm_util=[12], processes=[FakeProc(pid=pid, sm_pct=12)])
        frames = sampled(tmp_path, [gpu], probe, TICKS)
    for f in frames:
        print(f.t, f.sources.sched, [(v.state, v.cause) for v in f.verdicts], f.host.per_cpu_pct)
    (last,) = frames[-1].verdicts
    print(last.evidence, last.fixes)
    assert (last.state, last.cause) == ("busy_but_starving", "cpu_contention"), last
    text = "\n".join(last.evidence)
    assert f"may run only on CPU {box} (their affinity" in text, text
    assert f"while CPU {idle} (" in text and "outside it sat idle" in text, text
    assert last.fixes[0].startswith(f"widen the job's CPU set from {box} to "), last.fixes
    assert "taskset -a -cp " in last.fixes[0] and "--cpus-per-task=" in last.fixes[0]
    assert not any("use num_workers" in f for f in last.fixes), last.fixes
