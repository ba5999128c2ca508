"""Roles: trainers, DataLoader workers (grouped under their trainer), pin-memory threads."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from gputop.model.roles import assign_roles, thread_role_from_comm
from gputop.sampler import HostPass
from tests.procutil import kill_all, spawn_python, wait_for_comm
from tests.torchjob import running_trainer

FORKSERVER = "python3 -c from multiprocessing.forkserver import main; main(3, 4)"


def roles(parents, comms, gpu=(), cmdlines=None):
    cmdlines = cmdlines or {}
    return assign_roles(parents, comms, gpu, lambda p: cmdlines.get(p, ""))


def test_fork_workers_belong_to_their_parent():
    got = roles(
        {10: 1, 11: 10, 12: 10}, {10: "python3", 11: "pt_data_worker", 12: "pt_data_worker"}
    )
    assert got == {11: ("dataloader", 10), 12: ("dataloader", 10), 10: ("trainer", 10)}


def test_forkserver_in_between_is_skipped():
    parents = {10: 1, 20: 10, 21: 20}
    comms = {10: "python3", 20: "python3", 21: "pt_data_worker"}
    got = roles(parents, comms, cmdlines={20: FORKSERVER})
    assert got[21] == ("dataloader", 10)
    assert 20 not in got


def test_gpu_holder_wins_over_nearer_ancestor():
    parents = {5: 1, 10: 5, 11: 10}
    comms = {5: "python3", 10: "bash", 11: "pt_multiprocess"}
    got = roles(parents, comms, gpu=[5])
    assert got[11] == ("dataloader", 5)
    assert got[5] == ("trainer", 5)


def test_orphaned_worker_has_no_trainer():
    got = roles({11: 1}, {11: "pt_data_worker"})
    assert got == {11: ("dataloader", None)}


def test_gpu_process_is_a_trainer_even_without_workers():
    assert roles({7: 1}, {7: "python3"}, gpu=[7]) == {7: ("trainer", 7)}


def test_ancestor_loop_terminates():
    got = roles({11: 12, 12: 11}, {11: "pt_data_worker", 12: "pt_data_worker"})
    assert got[11][0] == "dataloader"


@pytest.mark.parametrize(
    ("comm", "role"),
    [
        ("pt_data_pin", "pin_memory"),
        ("pt_thread_data_0", "dataloader"),
        ("pt_data_worker", None),
        ("python3", None),
    ],
)
def test_thread_roles(comm, role):
    assert thread_role_from_comm(comm) == role


def test_real_renamed_thread_is_a_pin_memory_entry():
    code = textwrap.dedent(
        """
        import ctypes, threading, time
        libc = ctypes.CDLL(None)
        def pin():
            libc.prctl(15, b"pt_data_pin", 0, 0, 0)
            time.sleep(60)
        threading.Thread(target=pin, daemon=True).start()
        time.sleep(60)
        """
    )
    p = spawn_python(code)
    try:
        deadline = time.monotonic() + 10
        tid = None
        while tid is None and time.monotonic() < deadline:
            for t in os.listdir(f"/proc/{p.pid}/task"):
                with open(f"/proc/{p.pid}/task/{t}/comm") as f:
                    if f.read().strip() == "pt_data_pin":
                        tid = int(t)
            time.sleep(0.02)
        assert tid is not None
        r = HostPass(top_n=400).read(now=1.0, gpu_pids=[p.pid])
        got = {q.pid: q for q in r.processes}
        assert got[tid].role == "pin_memory" and got[tid].trainer_pid == p.pid
        assert got[p.pid].role == "trainer"
    finally:
        kill_all([p])


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
