"""Prints the numbers the diagnosis thresholds were derived from (docs/thresholds.md).

For each experiment a real CPU-PyTorch DataLoader loop (tests/torchjob.py LOOP,
which times its own next(iterator) and GPU stand-in with perf_counter) runs,
with or without CPU hogs on the same CPUs, while `gputop record` watches it
through the fake NVML. Printed per experiment, averaged over the frames after
a warm-up: the loop's own input-wait and GPU-wait shares, the trainer's
run-queue and (eBPF only) measured input-wait share, its DataLoader workers'
mean run-queue share, preemptions per second per worker, the host's CPU %, and
the verdicts gputop reached.

Usage: python bench/diag_thresholds.py [--seconds S] [--no-bpf] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakecuda import build_fake_cuda  # noqa: E402
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc  # noqa: E402
from tests.torchjob import loop_share_pct, running_loop  # noqa: E402

HOG = "import os\nwhile True: pass"

# name: (loop config, CPU hogs)
EXPERIMENTS: dict[str, tuple[dict[str, object], int]] = {
    # The issue's case: 2 workers at ~32 ms CPU per batch, a 20 ms sleeping step, 4 hogs.
    "starve-input": (
        {"workers": 2, "item_cpu_ms": 4, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        4,
    ),
    "starve-spin": (
        {"workers": 2, "item_cpu_ms": 0.5, "batch_size": 8, "step_ms": 20, "step": "spin"},
        4,
    ),
    "loaded-fed": (
        {"workers": 2, "item_cpu_ms": 0.25, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        4,
    ),
    "gpu-side": (
        {"workers": 2, "item_cpu_ms": 0.25, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        0,
    ),
    "input-bound": (
        {"workers": 1, "item_cpu_ms": 5, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        0,
    ),
    "nw0-contended": (
        {"workers": 0, "item_cpu_ms": 2, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        4,
    ),
    # The GPU step through the fake libcuda (its wait measured by the uprobes).
    "cuda-gpu-side": (
        {"workers": 2, "item_cpu_ms": 0.25, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        0,
    ),
    "cuda-spin-hogs": (
        {"workers": 2, "item_cpu_ms": 0.25, "batch_size": 8, "step_ms": 20, "step": "spin"},
        4,
    ),
    "cuda-starve": (
        {"workers": 2, "item_cpu_ms": 4, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        4,
    ),
    "cuda-nw0-cheap": (
        {"workers": 0, "item_cpu_ms": 0.1, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        0,
    ),
    "cuda-nw0-loads": (
        {"workers": 0, "item_cpu_ms": 2, "batch_size": 8, "step_ms": 20, "step": "sleep"},
        0,
    ),
    "cuda-nw0-spin": (
        {"workers": 0, "item_cpu_ms": 0.1, "batch_size": 8, "step_ms": 20, "step": "spin"},
        0,
    ),
}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _fmt(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.1f}"


def run(name: str, seconds: float, bpf: bool, tmp: Path) -> None:
    cfg, nhogs = EXPERIMENTS[name]
    if name.startswith("cuda-"):
        cfg = {**cfg, "cuda_lib": str(build_fake_cuda())}
    with running_loop(tmp, cfg, name=name.replace("-", "_")) as (loop, stats):
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(nhogs)]
        try:
            fake = FakeNvml(
                tmp / f"nvml-{name}",
                [
                    FakeGpu(
                        util=[97],
                        sm_util=[10],
                        power_w=[150],
                        processes=[FakeProc(pid=loop.pid, mem_mib=1000, sm_pct=10)],
                    )
                ],
            )
            cmd = [
                sys.executable,
                "-m",
                "gputop",
                "record",
                "--interval",
                "1",
                "--duration",
                str(seconds),
            ]
            if not bpf:
                cmd.insert(3, "--no-bpf")
            out = subprocess.run(
                cmd,
                cwd=ROOT,
                env=fake.env(),
                capture_output=True,
                text=True,
                timeout=seconds + 60,
                check=True,
            )
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        frames = [json.loads(line) for line in out.stdout.splitlines()]
    warm = frames[3:]
    tp = loop.pid
    tr = [p for f in warm for p in f["processes"] if p["pid"] == tp]
    wk = [
        p
        for f in warm
        for p in f["processes"]
        if p["trainer_pid"] == tp and p["role"] == "dataloader"
    ]
    nw = max(1, int(cfg["workers"]))  # type: ignore[call-overload]
    inp, gpu = loop_share_pct(stats, warm[0]["t"] - 1, warm[-1]["t"])
    runq = _mean([p["runq_pct"] for p in tr if p["runq_pct"] is not None])
    off = _mean([p["offcpu_pct"] for p in tr if p["offcpu_pct"] is not None])
    winp = _mean([p["wait_input_pct"] for p in tr if p.get("wait_input_pct") is not None])
    wirq = _mean([p["wait_irq_pct"] for p in tr if p.get("wait_irq_pct") is not None])
    wrq = _mean([p["runq_pct"] for p in wk if p["runq_pct"] is not None])
    wpre = _mean([p["preempt_per_s"] for p in wk])
    host = _mean([f["host"]["cpu_pct"] for f in warm])
    sync = _mean([p["gpu_sync_pct"] for p in tr if p.get("gpu_sync_pct") is not None])
    spin = _mean([p["gpu_sync_spin_pct"] for p in tr if p.get("gpu_sync_spin_pct") is not None])
    srq = _mean([p["gpu_sync_runq_pct"] for p in tr if p.get("gpu_sync_runq_pct") is not None])
    # On a CPU outside CUDA synchronization (its own work), where the sync is measured.
    work = None if off is None or sync is None else 100.0 - off - (spin or 0.0)
    # The host's share: run queue outside sync plus waiting for batches (measured).
    hostw = None if winp is None else (runq or 0.0) - (srq or 0.0) + winp
    states = [f["verdicts"][0]["state"] for f in frames]
    print(
        f"{name:<14} {_fmt(inp)} {_fmt(gpu)} | {_fmt(off)} {_fmt(runq)} {_fmt(winp)} {_fmt(wirq)}"
        f" {_fmt(sync)} {_fmt(spin)} {_fmt(work)} {_fmt(hostw)}"
        f" | {_fmt(wrq)} {_fmt(wpre)} {nw:>2} | {_fmt(host)} | {' '.join(s[:8] for s in states)}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--no-bpf", action="store_true")
    ap.add_argument("names", nargs="*", default=list(EXPERIMENTS))
    a = ap.parse_args()
    print(f"host: {os.cpu_count()} CPUs; source: {'procfs' if a.no_bpf else 'bpf if available'}")
    print(
        f"{'experiment':<14} {'loop:':>5} {'':>5} | {'trainer:':>8} {'':>5} {'':>5} {'':>5}"
        f" {'':>5} {'':>5} {'':>5} {'':>5} | {'workers:':>8} {'':>5} {'':>2} | {'host':>5} |"
    )
    print(
        f"{'':<14} {'input':>5} {'gpu':>5} | {'off':>5} {'runq':>5} {'w_in':>5} {'w_irq':>5}"
        f" {'sync':>5} {'spin':>5} {'work':>5} {'hostw':>5}"
        f" | {'runq':>5} {'pre/s':>5} {'n':>2} | {'cpu%':>5} | verdicts"
    )
    with tempfile.TemporaryDirectory() as d:
        for name in a.names:
            run(name, a.seconds, not a.no_bpf, Path(d))


if __name__ == "__main__":
    main()
