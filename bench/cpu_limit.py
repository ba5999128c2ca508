"""Prints what gputop says about a DataLoader job in a CPU-limited cgroup, beside the kernel's own
accounting (docs/diagnosis.md: `limit_used_pct`, `culprit_share_pct`).

A real CPU-PyTorch DataLoader loop (tests/torchjob.py LOOP: 2 workers burning 32 ms of
CPU per batch for a 20 ms sleeping step, ~1.6 CPUs wanted) runs in a new cgroup capped
at QUOTA CPUs (v1 `cpu.cfs_quota_us`, v2 `cpu.max`), with HOGS busy loops outside it,
while `gputop record` watches it through the fake NVML (GPU_UTIL 97 %, SM 10 %).
Printed per run: the share of CFS periods the kernel throttled the cgroup in, the job's
CPU use against its limit and each other process's share of the job's run-queue time
(both from the frames over the last 10 s window), and gputop's last verdict: state,
cause, evidence and fixes as it printed them.

Usage (root): python bench/cpu_limit.py [--seconds S] [--no-bpf] [QUOTA:HOGS ...]
(default: 0.25:0 0.25:1 1.5:4)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cgrouputil import cpu_limited_cgroup  # noqa: E402
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc  # noqa: E402
from tests.torchjob import descendants, running_loop  # noqa: E402

LOOP = {"workers": 2, "item_cpu_ms": 4, "batch_size": 8, "step_ms": 20, "step": "sleep"}
HOG = "while True: pass"
WINDOW_S = 10.0


def run(quota: float, hogs: int, seconds: float, bpf: bool) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        cpu_limited_cgroup(quota) as cg,
        running_loop(Path(tmp), LOOP) as (loop, _stats),
        contextlib.ExitStack() as stack,
    ):
        job = {loop.pid, *descendants(loop.pid)}
        for pid in job:
            cg.add(pid)
        for _ in range(hogs):
            hog = subprocess.Popen([sys.executable, "-c", HOG])
            stack.callback(hog.wait)
            stack.callback(hog.kill)
        fake = FakeNvml(
            Path(tmp) / "nvml",
            [FakeGpu(util=[97], sm_util=[10], power_w=[150], processes=[FakeProc(pid=loop.pid)])],
        )
        cmd = [sys.executable, "-m", "gputop", "record", "--interval", "0.5"]
        cmd += ["--duration", str(seconds)] + ([] if bpf else ["--no-bpf"])
        periods0, throttled0 = cg.throttling()
        out = subprocess.run(
            cmd, cwd=ROOT, env=fake.env(), capture_output=True, text=True, check=True
        )
        periods1, throttled1 = cg.throttling()
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    window = [f for f in frames if frames[-1]["t"] - f["t"] <= WINDOW_S]
    mode = frames[-1]["sources"]["sched"]
    window = [f for f in window if f["sources"]["sched"] == mode]
    used = [
        sum(p["cpu_pct"] for p in f["processes"] if p["pid"] in job) / 100.0 for f in window[1:]
    ]
    print(f"== quota {quota:g} CPUs, {hogs} hog(s) outside the cgroup, sched {mode}")
    print(
        f"kernel: throttled in {throttled1 - throttled0} of {periods1 - periods0} periods"
        f" ({100.0 * (throttled1 - throttled0) / max(1, periods1 - periods0):.0f}%)"
    )
    mean_used = sum(used) / max(1, len(used))
    print(f"job CPU use: {mean_used:.3f} CPUs = {100.0 * mean_used / quota:.0f}% of its limit")
    shares = _shares(window, job)
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:6]
    comm = {p["pid"]: p["comm"] for f in window for p in f["processes"]}
    print(
        "share of the job's run-queue time: "
        + (", ".join(f"pid {pid} {comm.get(pid, '?')} {s:.1f}%" for pid, s in top) or "n/a")
    )
    v = frames[-1]["verdicts"][0]
    print(f"verdict: {v['state']}, cause {v['cause']}")
    for line in v["evidence"]:
        print(f"  evidence: {line}")
    for line in v["fixes"]:
        print(f"  fix: {line}")


def _shares(frames: list[dict[str, Any]], job: set[int]) -> dict[int, float]:
    took: dict[int, float] = {}
    total = 0.0
    for f in frames:
        for p in f["processes"]:
            if p["pid"] not in job or p.get("preemptors") is None or p["offcpu_pct"] is None:
                continue
            runq = p["runq_threads_pct"]
            total += runq
            for e in p["preemptors"]:
                took[e["pid"]] = took.get(e["pid"], 0.0) + runq * e["share_pct"] / 100.0
    return {pid: 100.0 * t / total for pid, t in took.items()} if total else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=16.0)
    ap.add_argument("--no-bpf", action="store_true")
    ap.add_argument("runs", nargs="*", default=["0.25:0", "0.25:1", "1.5:4"])
    args = ap.parse_args()
    for spec in args.runs:
        quota, hogs = spec.split(":")
        run(float(quota), int(hogs), args.seconds, not args.no_bpf)


if __name__ == "__main__":
    main()
