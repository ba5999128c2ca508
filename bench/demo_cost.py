"""Prints what each demo scenario costs on this host and what it shows.

Runs `gputop record --demo NAME` for a few seconds per scenario and reports,
averaged over the frames: CPU used by the job (trainer + DataLoader workers),
by the background hogs, GPU_UTIL, SM activity, the trainer's run-queue wait and
the final verdict. With --bpf (root, bcc) the eBPF probe measures the scheduler
side, and the trainer's measured wait split is printed too: the input wait
(woken by its workers) and the GPU/interrupt wait (woken by a timer, its modelled
GPU sync), frames from the probe's first full interval on.
Usage: python bench/demo_cost.py [SECONDS] [--bpf]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputop.demo import SCENARIOS


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--bpf"]
    bpf = "--bpf" in sys.argv[1:]
    seconds = float(args[0]) if args else 5.0
    print(
        f"{'scenario':<16} {'job CPU%':>8} {'hogs CPU%':>9} {'GPU_UTIL':>8} {'SM%':>5}"
        f" {'trainer runq%':>13} {'input%':>6} {'irq%':>5}  verdict"
    )
    for name in SCENARIOS:
        sc = SCENARIOS[name]
        needs_root = sc.cpu_limit is not None or sc.read_iops is not None or sc.needs_probe
        if needs_root and os.geteuid() != 0:
            print(f"{name:<16} skipped: it needs root (a cgroup, a loop device or the probe)")
            continue
        if sc.needs_probe and not bpf:
            print(f"{name:<16} skipped: its verdict rests on the probe (run with --bpf)")
            continue
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
                *(() if bpf else ("--no-bpf",)),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        frames = [json.loads(line) for line in out.splitlines()][2:]
        if bpf:
            frames = [f for f in frames if f["sources"]["sched"] == "bpf"][1:] or frames
        job = hogs = util = sm = runq = 0.0
        waits: dict[str, list[float]] = {"wait_input_pct": [], "wait_irq_pct": []}
        for f in frames:
            trainer = next(p for p in f["processes"] if p["comm"] == "demo_trainer")
            job += sum(p["cpu_pct"] for p in f["processes"] if p["trainer_pid"] == trainer["pid"])
            hogs += sum(p["cpu_pct"] for p in f["processes"] if p["comm"] == "cpu_hog")
            util += f["gpus"][0]["util"]
            sm += f["gpus"][0]["sm_active"]
            runq += trainer["runq_pct"] or 0.0
            for k, vals in waits.items():
                if trainer.get(k) is not None:
                    vals.append(trainer[k])
        n = len(frames)
        split = " ".join(
            f"{sum(v) / len(v):{w}.1f}" if v else f"{'n/a':>{w}}"
            for v, w in zip(waits.values(), (6, 5), strict=True)
        )
        print(
            f"{name:<16} {job / n:8.1f} {hogs / n:9.1f} {util / n:8.1f} {sm / n:5.1f}"
            f" {runq / n:13.1f} {split}  {verdict_of(sc.ranks, frames[-1])}"
        )


def verdict_of(ranks: int, frame: dict[str, object]) -> str:
    """The scenario's verdict: its GPU's, or in a job of ranks the last rank's, with its cause
    (the numbers beside it are rank 0's, on GPU 0)."""
    verdicts = frame["verdicts"]
    assert isinstance(verdicts, list)
    v = next(v for v in verdicts if v["gpu"] == ranks - 1)
    return v["state"] if ranks == 1 else f"GPU {ranks - 1}: {v['state']}, cause {v['cause']}"


if __name__ == "__main__":
    main()
