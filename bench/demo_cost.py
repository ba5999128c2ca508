"""Prints what each demo scenario costs on this host and what it shows.

Runs `gputop record --demo NAME` for a few seconds per scenario and reports,
averaged over the frames: CPU used by the job (trainer + DataLoader workers),
by the background hogs, GPU_UTIL, SM activity, the trainer's run-queue wait and
the final verdict. Usage: python bench/demo_cost.py [SECONDS]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputop.demo import SCENARIOS


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    print(
        f"{'scenario':<16} {'job CPU%':>8} {'hogs CPU%':>9} {'GPU_UTIL':>8} {'SM%':>5}"
        f" {'trainer runq%':>13}  verdict"
    )
    for name in SCENARIOS:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "gputop",
                "record",
                "--demo",
                name,
                "--interval",
                "0.5",
                "--duration",
                str(seconds),
                "--no-bpf",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        frames = [json.loads(line) for line in out.splitlines()][2:]
        job = hogs = util = sm = runq = 0.0
        for f in frames:
            trainer = next(p for p in f["processes"] if p["comm"] == "demo_trainer")
            job += sum(p["cpu_pct"] for p in f["processes"] if p["trainer_pid"] == trainer["pid"])
            hogs += sum(p["cpu_pct"] for p in f["processes"] if p["comm"] == "cpu_hog")
            util += f["gpus"][0]["util"]
            sm += f["gpus"][0]["sm_active"]
            runq += trainer["runq_pct"] or 0.0
        n = len(frames)
        print(
            f"{name:<16} {job / n:8.1f} {hogs / n:9.1f} {util / n:8.1f} {sm / n:5.1f}"
            f" {runq / n:13.1f}  {frames[-1]['verdicts'][0]['state']}"
        )


if __name__ == "__main__":
    main()
