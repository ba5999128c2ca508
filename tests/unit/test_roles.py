"""Roles from a process tree built here: trainers, DataLoader workers (grouped under their
trainer), forkservers skipped, pin-memory and DataLoader threads by name."""

from __future__ import annotations

import pytest

from gputop.model.roles import assign_roles, thread_role_from_comm

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
