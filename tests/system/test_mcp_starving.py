"""An agent asks `gputop mcp` why a real PyTorch job starves: the SDK's client over stdio.

A CPU-torch loop with 2 real DataLoader workers shares 2 CPUs with CPU hogs; the fake
libnvidia-ml.so.1 reports the trainer as the compute process of a GPU at 97% GPU_UTIL and
12% SM activity. The verdict tool must say busy_but_starving with its cause; the trainer's
drill-down shows its workers and time split; the culprits are the hogs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.mcputil import Tools, with_session

TRAIN = """
import os, sys, torch
from torch.utils.data import DataLoader, Dataset

os.sched_setaffinity(0, {cpus})
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
started = False
for x, y in loader:
    for _ in range(8):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if not started:
        print("training", flush=True)
        started = True
"""
HOG = "import os; os.sched_setaffinity(0, {cpus})\nwhile True: pass"
# How many verdicts to ask for (0.5 s apart) before giving up on seeing the job starve.
POLLS = 40


@pytest.mark.torch
def test_the_verdict_tool_names_a_starved_dataloader_job_and_its_cause(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the CPU PyTorch wheel (the torch extra)")
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(cpus=cpus))
    # Same session as the hogs: with autogroup scheduling a new session would get its own
    # CPU share and never feel them.
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    hogs: list[subprocess.Popen[bytes]] = []
    seen: dict[str, object] = {}

    async def body(t: Tools) -> None:
        states = []
        for _ in range(POLLS):
            v = await t.ok("verdicts")
            (g0,) = v["verdicts"]
            states.append((g0["state"], g0["cause"]))
            if g0["state"] == "busy_but_starving" and g0["cause"] is not None:
                break
            await anyio.sleep(0.5)
        seen["states"], seen["verdict"] = states, g0
        seen["trainer"] = await t.ok("process", {"pid": trainer.pid})
        seen["culprits"] = await t.ok("top_culprits", {"minutes": 1})
        seen["gone"] = await t.error("process", {"pid": 2**22 + 7})

    try:
        assert trainer.stdout is not None and trainer.stdout.readline() == "training\n"
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
                    processes=[FakeProc(pid=trainer.pid, mem_mib=60000, sm_pct=11)],
                )
            ],
        )
        with_session(("--no-bpf", "--interval", "0.5"), fake.env(), body)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
        workers = psutil.Process(trainer.pid).children(recursive=True)
        trainer.kill()
        trainer.wait()
        for w in workers:
            w.kill()
        psutil.wait_procs(workers, timeout=10)

    v = seen["verdict"]
    assert isinstance(v, dict), seen
    assert v["state"] == "busy_but_starving", seen["states"]
    assert v["cause"] == "cpu_contention", seen["states"]
    assert v["trainer_pid"] == trainer.pid and v["util"] == 97.0
    evidence = "\n".join(v["evidence"])
    assert f"trainer pid {trainer.pid}" in evidence and "waiting for a CPU" in evidence, evidence
    assert v["fixes"] and v["lost_pct"] is not None and v["lost_pct"] > 0

    p = seen["trainer"]
    assert isinstance(p, dict) and p["role"] == "trainer" and p["gpus"] == [0]
    assert p["verdict"] == {"gpu": 0, "state": "busy_but_starving", "cause": "cpu_contention"}
    assert [w["role"] for w in p["workers"]].count("dataloader") == 2, p["workers"]
    assert p["time_split"]["runq"] > 0 and p["lost_pct"] == v["lost_pct"]

    c = seen["culprits"]
    assert isinstance(c, dict)
    hog_pids = {h.pid for h in hogs}
    named = {q["pid"] for q in c["gpus"][0]["processes"]}
    assert named & hog_pids, (named, hog_pids)
    assert c["gpus"][0]["states"].get("busy_but_starving", 0) >= 1
    assert "no process" in str(seen["gone"])
