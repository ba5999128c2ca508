"""The time bar's cells and the wait lines, without the app: cells fill the width in order,
/proc alone says what needs eBPF, and earlier blocked time is scaled into its share."""

from __future__ import annotations

from dataclasses import replace

from gputop.model.waits import wait_split
from gputop.screens.process import limit_line, wait_lines
from gputop.widgets.wait_bars import bar_cells
from tests.frames_fixture import (
    LIMIT_CGROUP,
    OTHER_TRAINER_PID,
    STARVING_TRAINER_PID,
    cpu_limited,
    make_frames,
    unmeasured,
)


def test_bar_cells_fill_the_width_exactly_in_order() -> None:
    frame = make_frames(5)[-1]
    for p in frame.processes:
        split = wait_split(p)
        if split is None:
            continue
        for width in (10, 33, 57):
            runs = bar_cells(split, width)
            assert sum(n for _, n in runs) == width
            keys = [k for k, _ in runs]
            assert keys == [s.key for s in split.segments if s.key in keys]


def test_wait_lines_under_proc_say_what_needs_ebpf() -> None:
    p = next(q for q in unmeasured(make_frames(3))[-1].processes if q.pid == STARVING_TRAINER_PID)
    lines = wait_lines(p)
    assert lines[0].startswith("last interval: on-CPU") and "blocked" in lines[0]
    assert "what it waits on (input, GPU, ...) needs the eBPF probe" in lines
    assert "preempted by: needs the eBPF probe" in lines


def test_a_frame_carrying_earlier_blocked_time_is_scaled_into_its_blocked_share() -> None:
    p = replace(
        make_frames(1)[0].processes[0],
        offcpu_pct=40.0,
        runq_pct=10.0,
        wait_input_pct=45.0,
        wait_irq_pct=15.0,
        wait_thread_pct=0.0,
        wait_other_pct=0.0,
    )
    split = wait_split(p)
    assert split is not None
    assert [round(s.pct, 1) for s in split.segments] == [60.0, 10.0, 22.5, 7.5, 0.0]
    still_asleep = replace(p, wait_input_pct=5.0, wait_irq_pct=0.0)
    split = wait_split(still_asleep)
    assert split is not None and split.pct("other") == 25.0


def test_with_the_gpu_wait_measured_time_in_sync_is_the_gpus_whatever_the_state() -> None:
    # 40% on a CPU of which 25 spinning in sync; 20% run queue of which 5 in sync and 5
    # right after a batch; 40% blocked: 20 in sync, 10 waiting for input, 10 interrupt.
    p = replace(
        make_frames(1)[0].processes[0],
        offcpu_pct=60.0,
        runq_pct=20.0,
        wait_input_pct=10.0,
        wait_irq_pct=10.0,
        wait_thread_pct=0.0,
        wait_other_pct=0.0,
        runq_after_input_pct=5.0,
        gpu_sync_pct=50.0,
        gpu_sync_spin_pct=25.0,
        gpu_sync_runq_pct=5.0,
    )
    split = wait_split(p)
    assert split is not None and split.measured
    got = {s.key: round(s.pct, 1) for s in split.segments}
    assert got == {"cpu": 15.0, "runq": 10.0, "input": 15.0, "gpu": 50.0, "other": 10.0}
    assert sum(got.values()) == 100.0


def test_without_the_gpu_measured_interrupt_wakeups_stand_in_for_it() -> None:
    p = replace(
        make_frames(1)[0].processes[0],
        offcpu_pct=60.0,
        runq_pct=20.0,
        wait_input_pct=10.0,
        wait_irq_pct=25.0,
        wait_thread_pct=0.0,
        wait_other_pct=0.0,
        runq_after_input_pct=5.0,
    )
    split = wait_split(p)
    assert split is not None
    got = {s.key: round(s.pct, 1) for s in split.segments}
    assert got == {"cpu": 40.0, "runq": 15.0, "input": 15.0, "irq": 25.0, "other": 5.0}
    assert "gpu" not in got


def test_throttled_time_is_carved_out_of_the_cpu_wait_never_counted_twice() -> None:
    trainer = next(p for p in make_frames(3)[-1].processes if p.pid == STARVING_TRAINER_PID)
    free = wait_split(trainer)
    assert free is not None and free.pct("throttled") is None
    for measured in (trainer, unmeasured([make_frames(3)[-1]])[0].processes[0]):
        whole = wait_split(measured)
        assert whole is not None
        # Throttled within the run-queue time, and more than all of it: capped at it.
        for thr in (5.0, 500.0):
            split = wait_split(replace(measured, cpu_throttled_pct=thr))
            assert split is not None
            keys = [s.key for s in split.segments]
            assert keys[keys.index("runq") + 1] == "throttled"
            runq_part = (split.pct("runq") or 0.0) + (split.pct("throttled") or 0.0)
            assert abs(runq_part - (whole.pct("runq") or 0.0)) < 1e-9
            assert split.pct("throttled") == min(thr, whole.pct("runq") or 0.0)
            assert (
                abs(sum(s.pct for s in split.segments) - sum(s.pct for s in whole.segments)) < 1e-9
            )
            for key in ("cpu", "input", "blocked"):
                assert split.pct(key) == whole.pct(key)


def test_a_network_wait_is_its_own_part_beside_disk_io_and_only_where_there_is_some() -> None:
    from gputop.model.waits import split_of
    from gputop.screens.process import SPLIT_COLOURS
    from gputop.widgets.wait_bars import COMPACT, GLYPHS, SHORT

    # A worker blocked 90%: 60 woken by network receive processing, 25 by a timer, 5 unknown.
    worker = dict(
        offcpu_pct=95.0, runq_pct=5.0, wait_input_pct=0.0, wait_irq_pct=25.0,
        wait_thread_pct=0.0, wait_other_pct=0.0,
    )  # fmt: skip
    got = split_of(**worker, net_wait_pct=60.0)  # type: ignore[arg-type]
    assert got is not None
    assert [s.key for s in got.segments] == ["cpu", "runq", "input", "irq", "net", "other"]
    assert (got.pct("net"), got.pct("irq"), got.pct("other")) == (60.0, 25.0, 5.0)
    assert abs(sum(s.pct for s in got.segments) - 100.0) < 1e-9
    # After disk I/O, before other; under half a percent it goes to other.
    both = split_of(**worker, net_wait_pct=60.0, io_wait_pct=20.0)  # type: ignore[arg-type]
    assert both is not None and [s.key for s in both.segments][-3:] == ["io", "net", "other"]
    low = split_of(**worker, net_wait_pct=0.3)  # type: ignore[arg-type]
    assert low is not None and "net" not in [s.key for s in low.segments]
    assert all("net" in d for d in (GLYPHS, SHORT, COMPACT, SPLIT_COLOURS))


def test_a_ranks_collective_wait_is_its_own_part_taken_from_other_and_only_for_ranks() -> None:
    from gputop.model.waits import split_of
    from gputop.widgets.wait_bars import COMPACT, GLYPHS, SHORT

    # Blocked 60%: 10 for batches, 5 by interrupts, 40 woken by its gloo threads, 5 unknown.
    args = dict(
        offcpu_pct=70.0, runq_pct=10.0, wait_input_pct=10.0, wait_irq_pct=5.0,
        wait_thread_pct=0.0, wait_other_pct=0.0,
    )  # fmt: skip
    plain = split_of(**args)  # type: ignore[arg-type]
    rank = split_of(**args, wait_collective_pct=40.0)  # type: ignore[arg-type]
    assert plain is not None and rank is not None
    assert "collective" not in [s.key for s in plain.segments]
    assert [s.key for s in rank.segments] == ["cpu", "runq", "input", "irq", "collective", "other"]
    assert rank.pct("collective") == 40.0 and rank.pct("other") == 5.0
    assert plain.pct("other") == 45.0  # without the class it was "other"
    assert abs(sum(s.pct for s in rank.segments) - 100.0) < 1e-9
    # With its CUDA synchronization measured too, and every class over-reported: scaled.
    gpu = split_of(**{**args, "wait_input_pct": 30.0}, wait_collective_pct=60.0, gpu_sync_pct=0.0)  # type: ignore[arg-type]
    assert gpu is not None and [s.key for s in gpu.segments][-2:] == ["collective", "other"]
    assert abs(sum(s.pct for s in gpu.segments) - 100.0) < 1e-9
    assert all(k in GLYPHS and k in SHORT and k in COMPACT for k in ("collective",))
    # A process the probe measured but that never waited on other ranks (not a rank, or a
    # rank between collectives): no collective part; under half a percent goes to other.
    none = split_of(**args, wait_collective_pct=0.0)  # type: ignore[arg-type]
    assert none is not None and none.segments == plain.segments
    tiny = split_of(**args, wait_collective_pct=0.4)  # type: ignore[arg-type]
    assert tiny is not None and tiny.segments == plain.segments


def test_disk_io_is_its_own_part_taken_from_interrupt_and_other_wakeups_only() -> None:
    from gputop.model.waits import split_of
    from gputop.screens.process import SPLIT_COLOURS
    from gputop.widgets.wait_bars import COMPACT, GLYPHS, SHORT

    # A worker blocked 90%: 85 woken by an interrupt (its disk's reads completing), 5 unknown;
    # 80% of the interval in uninterruptible sleep.
    worker = dict(
        offcpu_pct=95.0, runq_pct=5.0, wait_input_pct=0.0, wait_irq_pct=85.0,
        wait_thread_pct=0.0, wait_other_pct=0.0,
    )  # fmt: skip
    plain = split_of(**worker)  # type: ignore[arg-type]
    got = split_of(**worker, io_wait_pct=80.0)  # type: ignore[arg-type]
    assert plain is not None and got is not None
    assert [s.key for s in got.segments] == ["cpu", "runq", "input", "irq", "io", "other"]
    assert (got.pct("io"), got.pct("irq"), got.pct("other")) == (80.0, 5.0, 5.0)
    assert abs(sum(s.pct for s in got.segments) - 100.0) < 1e-9
    # More than the interrupt wake-ups: the rest comes out of other (woken by a kernel
    # worker, or still asleep at the tick).
    more = split_of(**worker, io_wait_pct=88.0)  # type: ignore[arg-type]
    assert more is not None and (more.pct("io"), more.pct("irq"), more.pct("other")) == (
        88.0,
        0.0,
        2.0,
    )
    # Never out of waiting for batches: a trainer whose wakers are its workers keeps them,
    # whatever the uninterruptible time (capped at its interrupt and other wake-ups).
    trainer = {**worker, "wait_input_pct": 70.0, "wait_irq_pct": 10.0}
    t = split_of(**trainer, io_wait_pct=60.0)  # type: ignore[arg-type]
    assert t is not None and (t.pct("input"), t.pct("io"), t.pct("irq")) == (70.0, 20.0, 0.0)
    assert t.pct("other") == 0.0
    # Under half a percent: no part, the split as without it.
    low = split_of(**worker, io_wait_pct=0.4)  # type: ignore[arg-type]
    assert low is not None and low.segments == plain.segments
    # With its CUDA synchronization measured: out of other (where interrupt wake-ups go there).
    gpu = split_of(**worker, io_wait_pct=80.0, gpu_sync_pct=0.0)  # type: ignore[arg-type]
    assert gpu is not None and [s.key for s in gpu.segments] == [
        "cpu", "runq", "input", "gpu", "io", "other",
    ]  # fmt: skip
    assert (gpu.pct("io"), gpu.pct("other")) == (80.0, 10.0)
    # A rank's collective wait keeps its place after it, before other.
    rank = split_of(**worker, io_wait_pct=40.0, wait_collective_pct=5.0)  # type: ignore[arg-type]
    assert rank is not None and [s.key for s in rank.segments][-3:] == ["io", "collective", "other"]
    assert all("io" in d for d in (GLYPHS, SHORT, COMPACT, SPLIT_COLOURS))


def test_the_limit_line_names_quota_file_burst_periods_and_cgroup() -> None:
    frame = cpu_limited(make_frames(1))[0]
    trainer = next(p for p in frame.processes if p.pid == STARVING_TRAINER_PID)
    assert trainer.cpu_limit is not None
    burst = replace(trainer, cpu_limit=replace(trainer.cpu_limit, burst=0.5))
    assert limit_line(burst) == (
        "CPU limit: 0.25 CPUs (cpu.cfs_quota_us), burst 0.5 CPUs; "
        "throttled in 9 of 10 periods (612 ms over its CPUs) this interval\n"
        f"  cgroup {LIMIT_CGROUP}"
    )
    first = replace(trainer, cpu_limit=replace(trainer.cpu_limit, periods=None))
    assert limit_line(first) == f"CPU limit: 0.25 CPUs (cpu.cfs_quota_us)\n  cgroup {LIMIT_CGROUP}"
    idle = replace(trainer, cpu_limit=replace(trainer.cpu_limit, periods=0, throttled_periods=0))
    assert "; no period this interval" in (limit_line(idle) or "")
    other = next(p for p in frame.processes if p.pid == OTHER_TRAINER_PID)
    assert limit_line(other) is None


def test_preemptors_under_half_a_percent_are_not_listed_as_preemptors() -> None:
    from gputop.model.frame import Preemptor

    p = replace(
        make_frames(1)[0].processes[0],
        preemptors=(Preemptor(900, "stress", 41.0), Preemptor(77, "kworker/0:1", 0.3)),
    )
    lines = wait_lines(p)
    i = lines.index("preempted by (share of its lost CPU time):")
    assert lines[i + 1 :] == ["   41%  pid 900 stress"]
    idle = replace(p, preemptors=(Preemptor(77, "kworker/0:1", 0.2),))
    assert wait_lines(idle)[-1] == "preempted by: nobody took 1% of its lost CPU time this interval"
    assert wait_lines(replace(p, preemptors=()))[-1] == (
        "preempted by: nobody took 1% of its lost CPU time this interval"
    )


def test_the_drill_down_names_a_ranks_place_in_its_job() -> None:
    from gputop.screens.process import rank_text

    p = next(p for p in make_frames(3)[-1].processes if p.pid == STARVING_TRAINER_PID)
    rank = replace(p, job_id="run-7", rank=1, world_size=2, local_rank=1)
    assert rank_text(rank) == "rank 1 of 2 (local 1), job run-7"
    launcher_only = replace(p, job_id="launcher-4100")
    assert rank_text(launcher_only) == "distributed job launcher-4100 (rank not readable)"


def test_the_table_names_a_rank_in_its_role_cell_and_filters_by_rank_and_job() -> None:
    from gputop.widgets.table_layout import matches, role_text

    p = next(p for p in make_frames(3)[-1].processes if p.pid == STARVING_TRAINER_PID)
    rank = replace(p, job_id="Run-7", rank=1, world_size=2)
    assert (role_text(p), role_text(rank)) == ("train", "rank1")
    assert matches(rank, "rank1") and matches(rank, "run-7")
    assert not matches(p, "rank1") and not matches(p, "run-7")


def test_in_tree_mode_a_jobs_ranks_stay_together_in_rank_order_with_their_workers() -> None:
    from gputop.widgets.table_layout import arrange

    procs = list(make_frames(3)[-1].processes)
    starving = next(p for p in procs if p.pid == STARVING_TRAINER_PID)
    other = next(p for p in procs if p.pid == OTHER_TRAINER_PID)
    # Rank 1 is the busier one; an unrelated process sorts between the two ranks by CPU.
    rank0 = replace(other, job_id="run-7", rank=0, world_size=2, cpu_pct=5.0)
    rank1 = replace(starving, job_id="run-7", rank=1, world_size=2, cpu_pct=90.0)
    middle = next(p for p in procs if p.role == "other")
    middle = replace(middle, cpu_pct=50.0)
    rest = [p for p in procs if p.pid not in {rank0.pid, rank1.pid, middle.pid}]
    rows = arrange([rank0, rank1, middle, *rest], sort_key="cpu")
    top = [p.pid for p, prefix in rows if prefix == "" and p.job_id == "run-7"]
    assert top == [rank0.pid, rank1.pid]
    # Together: rank 0 right above rank 1's own block (rank 0's workers between them).
    pids = [p.pid for p, _ in rows]
    between = pids[pids.index(rank0.pid) + 1 : pids.index(rank1.pid)]
    assert all(p.trainer_pid == rank0.pid for p, _ in rows if p.pid in between), between
    # Where the first of them sorts: the busier rank 1 puts the job above the 50 % process.
    assert pids.index(rank0.pid) < pids.index(middle.pid)
    flat = arrange([rank0, rank1, middle, *rest], tree=False)
    assert flat[0][0].pid == rank1.pid  # flat, they sort apart


def test_the_disk_io_line_says_what_was_measured_and_what_was_read() -> None:
    from gputop.model.frame import OpenStorage
    from gputop.screens.process import io_line

    p = replace(make_frames(1)[0].processes[0], io_wait_pct=None, storage=None)
    assert io_line(p) is None, "neither measured nor seen: nothing to say"
    assert io_line(replace(p, io_wait_pct=0.0)) == (
        "in disk I/O (uninterruptible sleep) 0% of the interval"
    )
    data = (OpenStorage("/data", "nfs4", "fs:/ds"), OpenStorage("", "block device", "/dev/loop3"))
    assert io_line(replace(p, io_wait_pct=37.4, storage=data)) == (
        "in disk I/O (uninterruptible sleep) 37% of the interval,"
        " reading /data (nfs4 on fs:/ds), /dev/loop3 (block device)"
    )
    # /proc alone caught it in D with files open: what it read, not for how long.
    assert (
        io_line(replace(p, storage=data[:1])) == "seen in disk I/O reading /data (nfs4 on fs:/ds)"
    )
    assert "in disk I/O (uninterruptible sleep) 37%" in "\n".join(
        wait_lines(replace(p, io_wait_pct=37.4))
    )


def test_a_workers_drill_down_says_how_long_it_waited_on_the_network_and_for_whom() -> None:
    from gputop.model.frame import NetPeer
    from gputop.screens.process import net_line

    p = replace(make_frames(1)[0].processes[0], net_wait_pct=None, peers=None)
    assert net_line(p) is None and net_line(replace(p, net_wait_pct=0.2)) is None
    assert net_line(replace(p, net_wait_pct=84.6)) == "waiting on the network 85% of the interval"
    peers = (NetPeer("127.0.0.1", 41825), NetPeer("2001:db8::7", 443))
    assert net_line(replace(p, net_wait_pct=84.6, peers=peers)) == (
        "waiting on the network 85% of the interval, reading from 127.0.0.1:41825,"
        " [2001:db8::7]:443 (tcp)"
    )


def test_a_trainers_drill_down_says_where_its_workers_spend_their_time() -> None:
    from gputop.model.frame import WorkersTime
    from gputop.screens.process import workers_time_line

    p = replace(make_frames(1)[0].processes[0], workers_time=None)
    assert workers_time_line(p) is None, "no workers' split: nothing to say"
    remote = WorkersTime(2, 3.4, 0.6, None, 0.0, 81.2, 14.8)
    assert workers_time_line(replace(p, workers_time=remote)) == (
        "its 2 DataLoader workers (each, on average): on a CPU 3%, waiting for a CPU 1%,"
        " disk I/O 0%, network 81%, blocked otherwise 15%"
    )
    assert "network 81%" in "\n".join(wait_lines(replace(p, workers_time=remote)))
    # Under /proc alone what the blocked time was is not known: said, never read as 0.
    proc = WorkersTime(1, 40.0, 2.0, 10.0, None, None, 48.0)
    assert workers_time_line(replace(p, workers_time=proc)) == (
        "its 1 DataLoader worker (each, on average): on a CPU 40%, waiting for a CPU 2%,"
        " throttled by its CPU limit 10%, blocked 48% (on what: needs the eBPF probe)"
    )


def test_a_trainers_host_to_device_copies_are_their_own_part_not_work_nor_gpu_wait() -> None:
    from gputop.model.waits import split_of

    # On a CPU 60% (30 of it inside copies), blocked 40%: 25 in the GPU wait, 10 inside
    # copies; 2% queued inside a copy stays a wait for a CPU.
    trainer = dict(
        offcpu_pct=40.0, runq_pct=5.0, wait_input_pct=0.0, wait_irq_pct=0.0,
        wait_thread_pct=0.0, wait_other_pct=0.0, gpu_sync_pct=25.0, gpu_sync_spin_pct=0.0,
        gpu_sync_runq_pct=0.0,
    )  # fmt: skip
    got = split_of(**trainer, h2d_copy_pct=42.0, h2d_copy_cpu_pct=30.0, h2d_copy_runq_pct=2.0)  # type: ignore[arg-type]
    assert got is not None
    assert [s.key for s in got.segments] == ["cpu", "runq", "input", "h2d", "gpu", "other"]
    assert (got.pct("cpu"), got.pct("h2d"), got.pct("gpu"), got.pct("runq")) == (
        30.0,
        40.0,
        25.0,
        5.0,
    )
    assert abs(sum(s.pct for s in got.segments) - 100.0) < 1e-9
    none = split_of(**trainer, h2d_copy_pct=0.2, h2d_copy_cpu_pct=0.1, h2d_copy_runq_pct=0.0)  # type: ignore[arg-type]
    assert none is not None and "h2d" not in [s.key for s in none.segments]
