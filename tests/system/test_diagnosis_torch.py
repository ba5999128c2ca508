"""Real PyTorch under real CPU contention, seen through the fake NVML: busy but starving.

A CPU-torch training loop with real DataLoader workers shares its CPUs with CPU
hogs; the fake libnvidia-ml.so.1 reports the trainer's real pid as the compute
process of a GPU whose GPU_UTIL is high and SM activity low. `gputop record`
(real nvidia-ml-py, real /proc) must blame the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import run_gputop

TRAIN = """
import os, signal, sys, torch
from torch.utils.data import DataLoader, Dataset

os.sched_setaffinity(0, {cpus})   # the workers inherit it
torch.set_num_threads(1)

class Data(Dataset):
    def __len__(self):
        return 10**7
    def __getitem__(self, i):
        return torch.randn(64), int(i % 10)

model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(
    Data(), batch_size=64, num_workers=2, prefetch_factor=4, persistent_workers=True
)

class Stop(Exception):
    pass

def stop(*_):
    raise Stop

signal.signal(signal.SIGTERM, stop)
it = iter(loader)
started = False
try:
    for x, y in it:
        for _ in range(8):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if not started:
            print("training", flush=True)
            started = True
except Stop:
    it._shutdown_workers()  # join the workers so none is left behind
"""
HOG = "import os; os.sched_setaffinity(0, {cpus})\nwhile True: pass"


@pytest.mark.torch
def test_torch_dataloader_loop_under_cpu_contention_is_busy_but_starving(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the CPU PyTorch wheel (the torch extra)")
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(cpus=cpus))
    # Same session as the hogs: with autogroup scheduling a new session would get
    # its own CPU share and never feel them.
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        assert trainer.stdout is not None and trainer.stdout.readline() == "training\n"
        # The contention starts once torch is imported and the workers run.
        hogs += [
            subprocess.Popen([sys.executable, "-c", HOG.format(cpus=cpus)])
            for _ in range(2 * len(cpus))
        ]
        fake = FakeNvml(
            tmp_path / "nvml",
            [
                FakeGpu(
                    util=[97],
                    sm_util=[12],
                    power_w=[140],
                    mem_used_mib=[61000],
                    processes=[FakeProc(pid=trainer.pid, mem_mib=60000, sm_pct=11)],
                )
            ],
        )
        out = run_gputop(
            *("record", "--no-bpf", "--interval", "0.5", "--duration", "4"),
            env=fake.env(),
            check=True,
        )
    finally:
        for p in hogs:
            p.kill()
            p.wait()
        trainer.terminate()
        try:
            trainer.wait(timeout=20)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait()
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    assert frames and frames[-1]["sources"]["gpu"] == "nvml"
    states = [f["verdicts"][0]["state"] for f in frames]
    seen = [f["verdicts"][0]["evidence"] for f in frames]
    assert "busy_but_starving" in states[:5], (states, seen)
    assert states[-1] == "busy_but_starving", (states, seen)

    last = frames[-1]
    procs = {p["pid"]: p for p in last["processes"]}
    assert procs[trainer.pid]["role"] == "trainer" and procs[trainer.pid]["gpus"] == [0]
    workers = [
        p
        for p in last["processes"]
        if p["trainer_pid"] == trainer.pid and p["role"] == "dataloader"
    ]
    assert len(workers) == 2 and all(w["comm"].startswith("pt_data_worker") for w in workers)
    verdict = last["verdicts"][0]
    evidence = "\n".join(verdict["evidence"])
    assert f"trainer pid {trainer.pid}" in evidence and "waiting for a CPU" in evidence, evidence
    assert "GPU_UTIL 97%" in evidence and "SM activity 12%" in evidence
    # A trainer and 2 workers on 2 busy CPUs: no pinning is correct here, renice leads.
    fixes = verdict["fixes"]
    assert fixes[0].startswith("renice the busiest other processes"), fixes
    assert any("pinning will not help" in f for f in fixes) and not any(
        "taskset" in f for f in fixes
    )
    assert "inferred, not measured" in evidence
