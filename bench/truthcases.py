"""What the threshold benches share (bench/storage_threshold.py, remote_threshold.py,
transfer_threshold.py): the command line of named cases, the probe opened once for all of
them, the ticks of a truth loop under the fake NVML, the window they are judged over and
the loop's own clocks read over it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from gputop.model.frame import Frame
from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakecuda import build_fake_cuda
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import sampled

TICKS = 8
SKIP = 2


def ticks(tmp: Path, pid: int, probe: BpfSchedProbe) -> list[Frame]:
    """TICKS sampler ticks beside one fake GPU at 30 % GPU_UTIL that ``pid`` holds."""
    gpu = FakeGpu(util=[30], sm_util=[10], processes=[FakeProc(pid=pid, sm_pct=10)])
    return sampled(tmp, [gpu], probe, TICKS)


def judged(frames: list[Frame]) -> tuple[list[Frame], float, float]:
    """The ticks after the first SKIP, and the wall-time span they cover."""
    window = frames[SKIP:]
    return window, window[0].t - window[0].interval, window[-1].t


def causes(window: Iterable[Frame]) -> str:
    return ", ".join(sorted({f"{v.state}/{v.cause}" for f in window for v in f.verdicts}))


def avg(v: Sequence[float]) -> str:
    return f"{sum(v) / len(v):5.1f}" if v else "    -"


def clock_share(path: Path, start: float, end: float) -> float | None:
    """% of [start, end] (wall time) a worker spent inside what it timed, by its own clock.

    ``path`` holds lines "wall-time cumulative-seconds"; the last may be half written."""
    try:
        log = [tuple(map(float, ln.split())) for ln in path.read_text().splitlines()[:-1]]
    except OSError:
        return None
    if len(log) < 2:
        return None
    a = min(log, key=lambda e: abs(e[0] - start))
    b = min(log, key=lambda e: abs(e[0] - end))
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else None


def worker_clocks(out: str, pids: Iterable[int], start: float, end: float) -> list[float]:
    """Each worker's own clock (the truth loop's ``<out>.reads.<pid>``) over [start, end]."""
    return [
        c
        for w in sorted(set(pids))
        if (c := clock_share(Path(f"{out}.reads.{w}"), start, end)) is not None
    ]


def main(
    prog: str,
    doc: str,
    cases: Sequence[str],
    run_case: Callable[[str, BpfSchedProbe, Path], None],
    needs: str = "the eBPF probe",
) -> int:
    """Parses the case names, opens the probe once and runs each case under it."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(cases)} (all)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in cases]
    if unknown:
        print(f"{prog}: no case {unknown[0]!r} (cases: {', '.join(cases)})", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{prog}: needs root ({needs})", file=sys.stderr)
        return 2
    cuda = build_fake_cuda()
    probe = BpfSchedProbe()
    probe.open()
    try:
        if not probe.wait_attached(180):
            print(f"{prog}: the probe did not attach: {probe.status}", file=sys.stderr)
            return 2
        for name in args.cases or list(cases):
            run_case(name, probe, cuda)
    finally:
        probe.close()
    return 0
