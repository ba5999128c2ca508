"""Roles from a process tree built here: trainers, DataLoader workers (grouped under their
trainer), forkservers skipped, pin-memory and DataLoader threads by name."""

from __future__ import annotations

import pytest

from gputop.model import roles as roles_module
from gputop.model.readings import ProcStat
from gputop.model.roles import RoleKeeper, assign_roles, thread_role_from_comm

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


# ---- RoleKeeper: roles kept across ticks, worked out again when the tree changed ----------

TRAINER, W1, W2, HELPER, BYSTANDER = 10, 11, 12, 20, 30


def stat(pid: int, ppid: int = 1, comm: str = "python3", start: int = 0) -> ProcStat:
    return ProcStat(
        pid=pid, ppid=ppid, comm=comm, state="S", start=start or pid * 100, nthreads=1,
        kthread=False, cpu_pct=0.0,
    )  # fmt: skip


def tree(*procs: ProcStat) -> dict[int, ProcStat]:
    return {p.pid: p for p in procs}


def fresh(stats: dict[int, ProcStat], gpu=(), cmdlines=None):
    """What assign_roles says of this tree from scratch (the keeper must say the same)."""
    cmdlines = cmdlines or {}
    return assign_roles(
        {p: s.ppid for p, s in stats.items()},
        {p: s.comm for p, s in stats.items()},
        [g for g in gpu if g in stats],
        lambda p: cmdlines.get(p, ""),
    )


@pytest.fixture
def walks(monkeypatch):
    """How many times the keeper worked the roles out."""
    count = [0]
    real = roles_module.assign_roles

    def counted(*args, **kw):
        count[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(roles_module, "assign_roles", counted)
    return count


def job() -> dict[int, ProcStat]:
    return tree(
        stat(TRAINER),
        stat(W1, TRAINER, "pt_data_worker"),
        stat(BYSTANDER, comm="sshd"),
    )


def test_roles_are_kept_while_nothing_they_rest_on_changed(walks) -> None:
    keeper = RoleKeeper()
    stats = job()
    first = keeper.roles(stats, None, (), lambda p: "")
    assert first == fresh(stats) == {W1: ("dataloader", TRAINER), TRAINER: ("trainer", TRAINER)}
    assert walks[0] == 1
    # The trainer and its worker run every tick and a bystander ran: same stat lines.
    for _ in range(5):
        assert keeper.roles(stats, {TRAINER, W1, BYSTANDER}, (), lambda p: "") == first
    assert walks[0] == 1, "not worked out again while the tree stayed the same"


def test_a_new_worker_is_picked_up_in_the_tick_it_appears() -> None:
    keeper = RoleKeeper()
    stats = job()
    keeper.roles(stats, None, (), lambda p: "")
    stats[W2] = stat(W2, TRAINER, "pt_data_worker")
    got = keeper.roles(stats, {W2}, (), lambda p: "")
    assert got == fresh(stats) and got[W2] == ("dataloader", TRAINER)


def test_a_worker_that_exits_loses_its_role_in_that_tick() -> None:
    keeper = RoleKeeper()
    stats = job()
    stats[W2] = stat(W2, TRAINER, "pt_data_worker")
    keeper.roles(stats, None, (), lambda p: "")
    del stats[W2]
    got = keeper.roles(stats, {W2}, (), lambda p: "")
    assert got == fresh(stats) and W2 not in got


def test_a_trainer_that_exits_leaves_its_worker_without_one() -> None:
    keeper = RoleKeeper()
    stats = job()
    keeper.roles(stats, None, (), lambda p: "")
    del stats[TRAINER]  # its worker, asleep, was not read: its stat line still names it
    got = keeper.roles(stats, {TRAINER}, (), lambda p: "")
    assert got == fresh(stats) == {W1: ("dataloader", None)}


def test_a_reused_pid_is_another_process() -> None:
    keeper = RoleKeeper()
    stats = job()
    keeper.roles(stats, None, (), lambda p: "")
    del stats[TRAINER]
    keeper.roles(stats, {TRAINER}, (), lambda p: "")
    # The worker's parent pid comes back as another process, a GPU holder this time.
    stats[TRAINER] = stat(TRAINER, comm="other", start=99_999)
    got = keeper.roles(stats, {TRAINER}, (TRAINER,), lambda p: "")
    assert (
        got
        == fresh(stats, gpu=(TRAINER,))
        == {
            TRAINER: ("trainer", TRAINER),
            W1: ("dataloader", TRAINER),
        }
    )


def test_an_ancestor_that_execs_into_a_forkserver_is_skipped_from_that_tick() -> None:
    keeper = RoleKeeper()
    stats = tree(
        stat(TRAINER), stat(HELPER, TRAINER), stat(W1, HELPER, "pt_data_worker")
    )  # fmt: skip
    cmdlines = {HELPER: "python3 prepare.py"}
    assert keeper.roles(stats, None, (), lambda p: cmdlines.get(p, ""))[W1] == (
        "dataloader",
        HELPER,
    )
    cmdlines[HELPER] = FORKSERVER
    got = keeper.roles(stats, {HELPER}, (), lambda p: cmdlines.get(p, ""))
    assert got == fresh(stats, cmdlines=cmdlines) and got[W1] == ("dataloader", TRAINER)


def test_a_gpu_holder_becomes_a_trainer_without_a_change_in_the_tree() -> None:
    keeper = RoleKeeper()
    stats = job()
    keeper.roles(stats, None, (), lambda p: "")
    got = keeper.roles(stats, set(), (BYSTANDER,), lambda p: "")
    assert got == fresh(stats, gpu=(BYSTANDER,)) and got[BYSTANDER] == ("trainer", BYSTANDER)
