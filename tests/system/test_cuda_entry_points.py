"""Every CUDA driver call that waits for the GPU, counted as GPU wait once per call.

The fake ``libcuda.so.1`` (tests/fakecuda/) exports every entry point gputop probes
(``SYNC_FUNCTIONS``: synchronizations, copies into host memory in every form); a
caller process (tests/fakecuda/caller.py) calls each on a thread of its own, timing
every call. The real probe, as root, measures each thread's time inside CUDA calls;
each must equal that thread's own clock: none missed (an entry point not probed
reads 0), none counted twice (a nested wait, an alias). Then the same through the
function pointers ``cuGetProcAddress`` hands out, as the CUDA runtime calls the
driver; and a trainer whose step ends in ``.item()``: a copy to pageable memory that
spins until the GPU is done, as CUDA's default does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.model.readings import Pipeline, ProbeReading
from gputop.sampler import HostPass, Sampler
from gputop.sources.cuda_probe import (
    DIRECTED_COPIES,
    H2D_COPIES,
    PROBED_FUNCTIONS,
    SYNC_FUNCTIONS,
    function_offsets,
)
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import Intervals
from tests.fakecuda import HERE
from tests.probeticks import needs_probe
from tests.procutil import HOG, kill_all, spawn_python
from tests.truthloop import read_steps, running_loop
from tests.truthwindow import ReadClock, Window

pytestmark = needs_probe()

POINTS = 3.0
WAIT_MS = 20.0
GAP_MS = 20.0
PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
LEGACY_STREAM = 1  # CU_GET_PROC_ADDRESS_LEGACY_STREAM
RUNTIME_VERSION = 13000  # what a CUDA 13 runtime asks cuGetProcAddress for


class Caller:
    """tests/fakecuda/caller.py running: its pid, thread ids and what each target calls."""

    def __init__(self, lib: Path, targets: list[str]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "caller.py"),
                str(lib),
                str(WAIT_MS),
                str(GAP_MS),
                *targets,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        ready = json.loads(self.proc.stdout.readline())
        self.tids: dict[str, int] = ready["tids"]
        self.symbols: dict[str, str | None] = ready["symbols"]

    def spans(self) -> dict[str, list[tuple[float, float]]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        return {
            t: [tuple(s) for s in v] for t, v in json.loads(self.proc.stdout.readline()).items()
        }

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _share(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """% of [t0, t1] covered by the spans (each clipped to the window)."""
    return 100.0 * sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans) / (t1 - t0)


def _measured(
    probe: BpfSchedProbe, caller: Caller, seconds: float
) -> tuple[ProbeReading, float, float]:
    """One probe interval of ``seconds`` over the caller, once its library is probed:
    (the reading, the monotonic times just before the two reads)."""
    pipeline = Pipeline({}, frozenset({caller.proc.pid}))
    intervals = Intervals(probe)
    intervals.read(pipeline)
    deadline = time.monotonic() + 20
    while True:
        time.sleep(0.5)
        r = intervals.read(pipeline)
        if r is not None and caller.proc.pid in r.cuda_tgids:
            break
        assert time.monotonic() < deadline, probe.cuda and probe.cuda.last_error
    t0 = time.monotonic()
    intervals.read(pipeline)
    time.sleep(seconds)
    t1 = time.monotonic()
    r = intervals.read(pipeline)
    assert r is not None
    return r, t0, t1


def _compare(
    probe: BpfSchedProbe, caller: Caller, seconds: float = 3.0, field: str = "sync_ns"
) -> dict[str, tuple[float, float]]:
    """Each target's (gputop's share of the window inside CUDA calls of the kind ``field``
    counts, its own clock's)."""
    return {
        t: (got[field], clock) for t, (got, clock) in _compare_all(probe, caller, seconds).items()
    }


def _compare_all(
    probe: BpfSchedProbe, caller: Caller, seconds: float
) -> dict[str, tuple[dict[str, float], float]]:
    """Each target's (gputop's shares of the window: sync_ns, h2d_ns; its own clock's)."""
    r, t0, t1 = _measured(probe, caller, seconds)
    spans = caller.spans()
    out = {}
    for target, tid in caller.tids.items():
        row = r.per_tid.get(tid)
        got = {
            f: 100.0 * getattr(row, f) / r.dt_ns if row is not None else 0.0
            for f in ("sync_ns", "h2d_ns")
        }
        out[target] = (got, _share(spans[target], t0, t1))
    return out


def test_every_probed_entry_point_is_counted_as_gpu_wait_once_per_call(
    probe: BpfSchedProbe, cuda_lib: Path
) -> None:
    exported = function_offsets(str(cuda_lib), SYNC_FUNCTIONS)
    assert set(exported) == set(SYNC_FUNCTIONS), "the fake lacks a probed entry point"
    caller = Caller(cuda_lib, [f"sym:{name}" for name in SYNC_FUNCTIONS])
    try:
        result = _compare(probe, caller)
    finally:
        caller.close()
    for target, (got, truth) in sorted(result.items()):
        print(f"{target:34s} gputop {got:5.1f}%  own clock {truth:5.1f}%")
    # cuMemcpy2D_v2 waits twice per call (its asynchronous copy, then a stream
    # synchronization), each inside the outer call: its own clock counts both once.
    assert result["sym:cuMemcpy2D_v2"][1] > 55.0, result["sym:cuMemcpy2D_v2"]
    wrong = {t: v for t, v in result.items() if abs(v[0] - v[1]) > POINTS or v[1] < 30.0}
    assert not wrong, wrong


def test_every_host_to_device_copy_is_a_copy_and_a_generic_one_from_host_memory_too(
    probe: BpfSchedProbe, cuda_lib: Path
) -> None:
    exported = function_offsets(str(cuda_lib), H2D_COPIES)
    assert set(exported) == set(H2D_COPIES), "the fake lacks a host-to-device entry point"
    # The generic copies tell their direction by the source's memory: that is the CO-RE
    # object's (bpf_find_vma); bcc's build counts them as GPU waits, whatever the source.
    directed = DIRECTED_COPIES if probe.loader == "libbpf" else ()
    targets = [f"sym:{n}" for n in H2D_COPIES] + [f"symh:{n}" for n in directed]
    caller = Caller(cuda_lib, targets)
    try:
        result = _compare_all(probe, caller, 3.0)
    finally:
        caller.close()
    for target, (got, truth) in sorted(result.items()):
        print(
            f"{target:34s} copy {got['h2d_ns']:5.1f}%  GPU wait {got['sync_ns']:5.1f}%"
            f"  own clock {truth:5.1f}%"
        )
    wrong = {
        t: (got, truth)
        for t, (got, truth) in result.items()
        if abs(got["h2d_ns"] - truth) > POINTS or truth < 30.0 or got["sync_ns"] > 0.5
    }
    assert not wrong, wrong


def test_calls_through_cuGetProcAddress_pointers_are_the_probed_functions(
    probe: BpfSchedProbe, cuda_lib: Path
) -> None:
    bases = ["cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"]
    bases += ["cuMemcpyDtoHAsync", "cuMemcpyAsync", "cuMemcpyDtoH", "cuMemcpy3DBatchAsync"]
    bases += ["cuMemcpyHtoD", "cuMemcpyHtoDAsync"]
    targets = [
        f"proc:{b}:{RUNTIME_VERSION}:{f}" for b in bases for f in (LEGACY_STREAM, PER_THREAD)
    ]
    caller = Caller(cuda_lib, targets)
    try:
        both = _compare_all(probe, caller, 3.0)
    finally:
        caller.close()
    # A host-to-device copy's time is the copy's; every other call's, the GPU wait's.
    result = {
        t: (got["h2d_ns" if "HtoD" in t else "sync_ns"], truth) for t, (got, truth) in both.items()
    }
    for target, (got, truth) in sorted(result.items()):
        export = caller.symbols[target]
        print(f"{target:40s} -> {export}: gputop {got:5.1f}%  own clock {truth:5.1f}%")
        assert export in PROBED_FUNCTIONS, f"{target} calls {export}, not a probed export"
    wrong = {t: v for t, v in result.items() if abs(v[0] - v[1]) > POINTS or v[1] < 30.0}
    assert not wrong, wrong


def _row_window(sampler: Sampler, pid: int, n: int) -> tuple[list[float], list[float | None]]:
    """n ticks 1 s apart: (the monotonic time before each, the row's gpu_sync_pct)."""
    times, values = [], []
    next_at = time.monotonic() + 1.0
    for _ in range(n):
        time.sleep(max(0.0, next_at - time.monotonic()))
        times.append(time.monotonic())
        frame = sampler.tick()
        row = next((p for p in frame.processes if p.pid == pid), None)
        values.append(None if row is None else row.gpu_sync_pct)
        next_at = times[-1] + 1.0
    return times, values


@pytest.mark.torch
@pytest.mark.parametrize("hogs", [0, 4], ids=["idle", "4-hogs"])
def test_a_trainer_ending_each_step_in_item_waits_inside_the_copy(
    probe: BpfSchedProbe, cuda_lib: Path, tmp_path: Path, hogs: int
) -> None:
    # Each step queues 30 ms of GPU work, then `.item()`: cuMemcpyDtoHAsync_v2 into
    # pageable memory, which spins until the work is done, then cuStreamSynchronize,
    # which has nothing left to wait for (torch's memcpy_and_sync).
    cpus = sorted(os.sched_getaffinity(0))[:2]
    args = ["--standin", "cuda-spin", "--cuda-lib", str(cuda_lib), "--cuda-step", "item"]
    args += ["--workers", "2", "--sample-cpu-ms", "10", "--step-ms", "30", "--persistent"]
    hog_procs = [spawn_python(HOG, cpus[i % len(cpus)]) for i in range(hogs)]
    clock = ReadClock(probe)
    try:
        with running_loop(tmp_path, args) as (pid, out):
            sampler = Sampler(procs=HostPass(top_n=100_000), probe=clock, interval_s=1.0)
            sampler.tick()
            for _ in range(20):
                time.sleep(1.0)
                row = next((p for p in sampler.tick().processes if p.pid == pid), None)
                if row is not None and row.gpu_sync_pct:
                    break
            _, values = _row_window(sampler, pid, 6)
            steps = read_steps(out)
    finally:
        kill_all(hog_procs)
    # Its own clock: from the copy's start to the synchronization's end (the launch
    # before the copy is the trainer's own work), over each probe interval (stalled ones
    # left out and named: tests/truthwindow.py).
    win = Window(clock.reads[-len(values) :], [s.step_end for s in steps], 1.0)
    sync = win.compare(
        f"item() hogs={hogs}: gpu_sync_pct",
        values,
        lambda a, b: _share([(s.wait_start, s.step_end) for s in steps], a, b),
    )
    assert all(r.gputop is not None for r in sync.rows), sync.table()
    _, truth = sync.means()
    assert truth > 20.0, truth
    print(sync.within(POINTS))
