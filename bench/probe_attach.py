"""Time to the first eBPF frame: from starting gputop to the end of its first frame whose
scheduler source is the eBPF probe, for each loader, on a quiet machine and with 4 CPU hogs.

Each measurement starts a fresh ``gputop record`` (default interval 1 s) and reads its
JSON lines; the clock runs from just before the process is started to the moment the
first line with ``"sched": "bpf"`` arrives, so interpreter start-up, imports, loading
(or compiling) the probe and the first interval all count. The loaders are the object
built ahead of time (libbpf) and bcc's run-time compile (at nice 19, gputop's default),
forced with ``GPUTOP_BPF_LOADER``. The hogs are started by this script, in its session,
so they compete with gputop in the same autogroup the way a training job started from
the same shell would (nice ranks threads only within one autogroup). gputop's modules
are compiled to bytecode first, as ``pip install`` does (a source checkout run with
PYTHONDONTWRITEBYTECODE=1 would compile them at every start). Needs root.

    python bench/probe_attach.py [--rounds 3] [--timeout 180] [--loaders libbpf,bcc]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOG = "while True: pass"


def first_bpf_frame(loader: str, timeout_s: float, interval: str) -> tuple[float | None, float]:
    """(seconds to the first eBPF frame or None, seconds to the first frame of any kind)."""
    env = dict(os.environ, PYTHONPATH=ROOT, GPUTOP_BPF_LOADER=loader)
    started = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", "--interval", interval],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    first_any: float | None = None
    try:
        assert p.stdout is not None
        while time.monotonic() - started < timeout_s:
            ready, _, _ = select.select([p.stdout], [], [], 0.5)
            if not ready:
                continue
            line = p.stdout.readline()
            now = time.monotonic() - started
            if not line:
                break
            first_any = now if first_any is None else first_any
            if json.loads(line)["sources"]["sched"] == "bpf":
                return now, first_any
        return None, first_any if first_any is not None else float("nan")
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _fmt(v: float | None, timeout_s: float) -> str:
    return f">{timeout_s:.0f}" if v is None else f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180.0, help="give up on a round after this")
    ap.add_argument("--interval", default="1", help="gputop's --interval (default 1)")
    ap.add_argument("--loaders", default="libbpf,bcc", help="comma-separated (default both)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (eBPF)", file=sys.stderr)
        return 2
    compileall.compile_dir(os.path.join(ROOT, "gputop"), quiet=1)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(
        f"load average before: {load}; {len(os.sched_getaffinity(0))} CPUs;"
        f" gputop record --interval {args.interval}; seconds from start to the first eBPF frame"
        " (first frame of any kind in brackets)"
    )
    for label, n_hogs in (("quiet", 0), ("4 hogs on 2 cores, same session", 4)):
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n_hogs)]
        for h in hogs:
            os.sched_setaffinity(h.pid, set(cpus))
        try:
            time.sleep(0.5 if hogs else 0)
            for loader in args.loaders.split(","):
                runs = [
                    first_bpf_frame(loader, args.timeout, args.interval) for _ in range(args.rounds)
                ]
                got = [r[0] for r in runs if r[0] is not None]
                med = (
                    _fmt(statistics.median(got), args.timeout)
                    if len(got) == len(runs)
                    else _fmt(None, args.timeout)
                )
                each = " ".join(f"{_fmt(b, args.timeout)} ({a:.2f})" for b, a in runs)
                print(f"{label:32s} {loader:6s}: median {med} s  [{each}]", flush=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
