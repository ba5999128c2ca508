"""Prints what gputop says about a DataLoader job in a CPU-limited cgroup, beside the kernel's own
accounting (docs/thresholds.md: `limit_used_pct`, `culprit_share_pct`).

A real CPU-PyTorch DataLoader loop (tests/torchjob.py LOOP: 2 workers burning 32 ms of
CPU per batch for a 20 ms sleeping step, ~1.6 CPUs wanted) runs in a new cgroup capped
at QUOTA CPUs (v1 `cpu.cfs_quota_us`, v2 `cpu.max`), with HOGS busy loops outside it,
while `gputop record` watches it through the fake NVML (GPU_UTIL 97 %, SM 10 %).
Printed per run, over the verdict's last 10 s window: the share of CFS periods the
kernel throttled the cgroup in (its own cpu.stat, read every 0.1 s beside the record)
against the share gputop quotes; the kernel's throttled time (summed over CPUs, s per s)
against the job's throttled time gputop measured or inferred (its processes' main
threads summed, s per s); the job's CPU use against its limit; each other process's
share of the job's run-queue time; and gputop's last verdict as it printed it.
QUOTA "none" runs the job in no cgroup (the same job under the same hogs, no limit).

Usage (root): python bench/cpu_limit.py [--seconds S] [--no-bpf] [QUOTA:HOGS ...]
(default: 0.25:0 0.5:1 none:1 1.5:4)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cgrouputil import Count, cpu_limited_cgroup  # noqa: E402
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc  # noqa: E402
from tests.recordutil import job_runq_shares  # noqa: E402
from tests.torchjob import descendants, running_loop  # noqa: E402

LOOP = {"workers": 2, "item_cpu_ms": 4, "batch_size": 8, "step_ms": 20, "step": "sleep"}
HOG = "while True: pass"
WINDOW_S = 10.0


def _at(counts: list[Count], t: float) -> Count:
    return min(counts, key=lambda c: abs(c[0] - t))


def run(quota: float | None, hogs: int, seconds: float, bpf: bool) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.ExitStack() as stack,
    ):
        cg = stack.enter_context(cpu_limited_cgroup(quota)) if quota is not None else None
        loop, _stats = stack.enter_context(running_loop(Path(tmp), LOOP))
        job = {loop.pid, *descendants(loop.pid)}
        for pid in job if cg is not None else ():
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
        with cg.counting() if cg else contextlib.nullcontext([]) as counts:
            out = subprocess.run(
                cmd, cwd=ROOT, env=fake.env(), capture_output=True, text=True, check=True
            )
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    window = [f for f in frames if frames[-1]["t"] - f["t"] < WINDOW_S]
    mode = frames[-1]["sources"]["sched"]
    window = [f for f in window if f["sources"]["sched"] == mode]
    span = frames[-1]["t"] - (window[0]["t"] - window[0]["interval"])
    used = [
        sum(p["cpu_pct"] for p in f["processes"] if p["pid"] in job) / 100.0 for f in window[1:]
    ]
    limit = f"quota {quota:g} CPUs" if quota is not None else "no limit"
    print(f"== {limit}, {hogs} hog(s) outside the job, sched {mode}")
    v = frames[-1]["verdicts"][0]
    if counts:
        a, b = _at(counts, window[0]["t"] - window[0]["interval"]), _at(counts, frames[-1]["t"])
        periods, throttled, ns = b[1] - a[1], b[2] - a[2], b[3] - a[3]
        quoted = next((e for e in v["evidence"] if "throttled it in" in e), "")
        said = quoted.split("throttled it in ")[1].split("%")[0] if quoted else "n/a"
        print(
            f"periods throttled: kernel {throttled} of {periods}"
            f" ({100.0 * throttled / max(1, periods):.0f}%), gputop says {said}%"
        )
        procs = [p for p in window[-1]["processes"] if p["pid"] in job]
        per_s = [
            sum(p["cpu_throttled_pct"] or 0.0 for p in f["processes"] if p["pid"] in job) / 100.0
            for f in window
        ]
        sources = {p["cpu_limit"]["throttled_source"] for p in procs if p.get("cpu_limit")}
        print(
            f"throttled time: kernel {ns / 1e9 / span:.2f} s/s (summed over CPUs), the job's"
            f" main threads {sum(per_s) / len(per_s):.2f} s/s"
            f" ({', '.join(sorted(s for s in sources if s)) or 'n/a'})"
        )
    mean_used = sum(used) / max(1, len(used))
    of_limit = f" = {100.0 * mean_used / quota:.0f}% of its limit" if quota else ""
    print(f"job CPU use: {mean_used:.3f} CPUs{of_limit}")
    shares = job_runq_shares(window, job)
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:6]
    comm = {p["pid"]: p["comm"] for f in window for p in f["processes"]}
    print(
        "share of the job's run-queue time: "
        + (", ".join(f"pid {pid} {comm.get(pid, '?')} {s:.1f}%" for pid, s in top) or "n/a")
    )
    print(f"verdict: {v['state']}, cause {v['cause']}")
    for line in v["evidence"]:
        print(f"  evidence: {line}")
    for line in v["fixes"]:
        print(f"  fix: {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=16.0)
    ap.add_argument("--no-bpf", action="store_true")
    ap.add_argument("runs", nargs="*", default=["0.25:0", "0.5:1", "none:1", "1.5:4"])
    args = ap.parse_args()
    for spec in args.runs:
        quota, _, hogs = spec.partition(":")
        try:
            q = None if quota == "none" else float(quota)
            n = int(hogs or 0)
        except ValueError:
            ap.error(f"bad run {spec!r}: want QUOTA:HOGS, e.g. 0.25:1 or none:1")
        run(q, n, args.seconds, not args.no_bpf)


if __name__ == "__main__":
    main()
