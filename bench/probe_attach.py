"""How long the eBPF probe takes to compile and attach: idle, and with 4 CPU hogs on 2 cores.

Each measurement is a fresh process (nothing cached) that opens a
``BpfSchedProbe`` and waits for it; the time is from ``open()`` to attached.
The compile runs at nice 19 (gputop's default, so it does not starve the job
it watches) and, for comparison, at nice 0. The hogs are started by this
script, in its session, so they compete with the compile in the same
autogroup the way a training job started from the same shell would. Needs root.

    python bench/probe_attach.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOG = "while True: pass"


def one(nice: int) -> int:
    """Child: attach once at this compile nice value, print the seconds it took."""
    sys.path.insert(0, ROOT)
    from gputop.sources.sched_probe import BpfSchedProbe

    probe = BpfSchedProbe(compile_nice=nice)
    started = time.monotonic()
    probe.open()
    ok = probe.wait_attached(600)
    took = time.monotonic() - started
    probe.close()
    if not ok:
        print(f"failed: {probe.status.reason}", flush=True)
        return 1
    print(f"{took:.3f}", flush=True)
    return 0


def measure(nice: int) -> float:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", str(nice)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    return float(out.splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        return one(args.one)
    if os.geteuid() != 0:
        print("needs root (eBPF)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))[:2]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"load average before: {load}; CPUs {len(os.sched_getaffinity(0))}")
    for label, n_hogs in (("idle", 0), ("4 hogs on 2 cores", 4)):
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n_hogs)]
        for h in hogs:
            os.sched_setaffinity(h.pid, set(cpus))
        try:
            time.sleep(0.5 if hogs else 0)
            for nice in (19, 0):
                vals = [measure(nice) for _ in range(args.rounds)]
                runs = " ".join(f"{v:.2f}" for v in vals)
                med = statistics.median(vals)
                print(f"{label:18s} compile nice {nice:2d}: attach median {med:.2f} s [{runs}]")
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
