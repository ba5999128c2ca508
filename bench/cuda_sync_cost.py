"""What the CUDA synchronization uprobes cost, and how soon a trainer's GPU wait is measured.

1. Cost per probed call: a process calls a zero-length ``cuStreamSynchronize`` of the
   fake ``libcuda.so.1`` (tests/fakecuda/) N times, timing the loop with
   ``perf_counter``: without gputop's probe, with the probe attached to that library
   and the process watched (entry and return programs run), and attached but not
   watched (the programs return at once). Rounds interleave the three.
2. Time to the first measured GPU wait: a trainer-like process makes its first CUDA
   call at a known moment; the probe is read once a second, as gputop does, with the
   process watched; the time from that call to the first reading that has the
   process's ``sync_ns`` measured.

Needs root.

    python bench/cuda_sync_cost.py [--calls 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.model.readings import Pipeline  # noqa: E402
from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.fakecuda import build_fake_cuda  # noqa: E402

LOOP = """
import ctypes, sys, time
cu = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
sync = cu.cuStreamSynchronize
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
t = time.perf_counter()
for _ in range(n):
    sync(None)
sys.stdout.write(f"{(time.perf_counter() - t) / n * 1e9:.1f}\\n"); sys.stdout.flush()
"""

FIRST_CALL = """
import ctypes, sys, time
time.sleep(float(sys.argv[2]))
cu = ctypes.CDLL(sys.argv[1])
cu.fake_cuda_set(ctypes.c_longlong(20_000_000), 0)
sys.stdout.write(f"{time.monotonic():.6f}\\n"); sys.stdout.flush()
while True:
    cu.cuStreamSynchronize(None)
    time.sleep(0.02)
"""


def per_call_ns(lib: Path, calls: int, probe: BpfSchedProbe | None, watch: bool) -> float:
    p = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(lib), str(calls)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        assert p.stdout.readline() == "ready\n"
        if probe is not None:
            pipe = Pipeline({}, frozenset({p.pid}) if watch else frozenset())
            probe.read(pipe)
            # The library is found and attached on a read handed the pipeline watching it.
            deadline = time.monotonic() + 10
            while not (probe.cuda and probe.cuda.functions()):
                probe.read(pipe)
                if time.monotonic() > deadline:
                    raise RuntimeError("the probe did not attach to the fake libcuda")
                time.sleep(0.1)
        p.stdin.write("go\n")
        p.stdin.flush()
        return float(p.stdout.readline())
    finally:
        p.kill()
        p.wait()


def first_measured_s(lib: Path, probe: BpfSchedProbe) -> float:
    p = subprocess.Popen(
        [sys.executable, "-c", FIRST_CALL, str(lib), "1.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None
        pipe = Pipeline({}, frozenset({p.pid}))
        first_call = None
        deadline = time.monotonic() + 30
        os.set_blocking(p.stdout.fileno(), False)
        while time.monotonic() < deadline:
            r = probe.read(pipe)
            if first_call is None:
                line = p.stdout.readline()
                if line:
                    first_call = float(line)
            if r is not None and p.pid in r.cuda_tgids and first_call is not None:
                return time.monotonic() - first_call
            time.sleep(1.0)
        raise RuntimeError("no measured GPU wait within 30 s")
    finally:
        p.kill()
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (eBPF)", file=sys.stderr)
        return 2
    lib = build_fake_cuda()
    with open("/proc/loadavg") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}")
    probe = BpfSchedProbe()
    probe.open()
    if not probe.wait_attached(120):
        print(f"probe did not attach: {probe.status.reason}", file=sys.stderr)
        return 1
    try:
        results: dict[str, list[float]] = {"no probe": [], "probed, watched": [], "probed": []}
        # The probe stays attached: "no probe" rounds run before the library is probed.
        for _ in range(args.rounds):
            results["no probe"].append(per_call_ns(lib, args.calls, None, False))
        for _ in range(args.rounds):
            results["probed, watched"].append(per_call_ns(lib, args.calls, probe, True))
            results["probed"].append(per_call_ns(lib, args.calls, probe, False))
        base = statistics.median(results["no probe"])
        print(f"{args.calls} zero-length cuStreamSynchronize calls, median of {args.rounds}:")
        for label, vals in results.items():
            med = statistics.median(vals)
            extra = "" if label == "no probe" else f"  (+{med - base:.0f} ns per call)"
            runs = " ".join(f"{v:.0f}" for v in vals)
            print(f"  {label:16s} {med:8.0f} ns per call{extra}  [{runs}]")
        firsts = [first_measured_s(lib, probe) for _ in range(3)]
        print(
            "first CUDA call to the first reading with it measured (reads 1 s apart):"
            f" {' '.join(f'{v:.2f}' for v in firsts)} s"
        )
    finally:
        probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
