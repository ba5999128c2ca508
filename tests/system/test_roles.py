"""Real PyTorch DataLoader workers (fork, spawn, forkserver) group under their trainer and are
gone when it is."""

from __future__ import annotations

import time

import pytest

from gputop.sampler import HostPass
from tests.procutil import wait_for_comm
from tests.torchjob import running_trainer


@pytest.mark.torch
@pytest.mark.parametrize("ctx", ["fork", "spawn", "forkserver"])
def test_real_pytorch_dataloader_workers_group_under_trainer(tmp_path, ctx):
    pytest.importorskip("torch", reason="needs the CPU PyTorch wheel (the torch extra)")
    mine: list = []
    with running_trainer(tmp_path, ctx) as p:
        src = HostPass(top_n=5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = src.read(now=time.monotonic())
            mine = [q for q in r.processes if q.role == "dataloader" and q.trainer_pid == p.pid]
            if len(mine) == 2:
                break
            time.sleep(0.2)
        assert len(mine) == 2, f"processes seen: {r.processes}"
        for w in mine:
            wait_for_comm(w.pid, "pt_data_worker")
            assert w.comm.startswith(("pt_data_worker", "pt_multiprocess"))
        trainer = next(q for q in r.processes if q.pid == p.pid)
        assert trainer.role == "trainer" and trainer.trainer_pid == p.pid
        if ctx == "forkserver":
            # The forkserver sits between trainer and workers; it is not the trainer.
            assert all(w.ppid != p.pid for w in mine)
    deadline = time.monotonic() + 10
    while any(_alive(w.pid) for w in mine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w.pid) for w in mine), "DataLoader workers leaked"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ")[1][:1] != b"Z"
    except OSError:
        return False
