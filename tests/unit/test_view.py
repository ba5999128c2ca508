"""The screen's view of a tick: what every widget shows, worked out once in the model."""

from __future__ import annotations

from dataclasses import replace

from gputop.model.history import History
from gputop.model.view import STRIP_TICKS, screen_view
from tests.frames_fixture import STARVING_TRAINER_PID, make_frame


def test_preemptions_since_watching_count_from_the_first_frame_that_held_the_process() -> None:
    h = History(60.0, 1.0)
    first = make_frame(0)
    h.add(first)
    h.add(make_frame(1))
    view = screen_view(h)
    assert view.frame is not None
    for p in view.frame.processes:
        base = next(q for q in first.processes if q.key == p.key).preempt_total
        assert view.preempt_since[p.key] == max(0, p.preempt_total - base)
        assert view.since_watch(p) == view.preempt_since[p.key]


def test_the_verdict_strip_holds_the_worst_state_per_tick_and_how_long_it_has_lasted() -> None:
    h = History(600.0, 1.0)
    for i in range(STRIP_TICKS + 20):
        f = make_frame(i)
        # Calm until the last 15 ticks, then starving.
        calm = tuple(replace(v, state="ok", evidence=(), fixes=()) for v in f.verdicts)
        h.add(f if i >= STRIP_TICKS + 5 else replace(f, verdicts=calm))
    view = screen_view(h)
    assert len(view.verdict_strip) == STRIP_TICKS
    assert view.verdict_strip[-15:] == ("busy_but_starving",) * 15
    assert view.verdict_strip[-16] == "ok"
    assert view.verdict_run_s == 15.0


def test_a_gpu_series_is_the_newest_values_and_shared_by_callers() -> None:
    h = History(600.0, 1.0)
    for i in range(30):
        h.add(make_frame(i))
    view = screen_view(h, paused=True, replay="replay 3/30")
    assert view.frame is not None
    uuid = view.frame.gpus[0].uuid
    last = view.gpu_series(uuid, "util", 10)
    assert last == h.gpu_series(uuid, "util")[-10:]
    assert view.gpu_series(uuid, "util", 10) is last
    assert view.gpu_series(uuid, "util", 0) == h.gpu_series(uuid, "util")
    assert view.paused and view.replay == "replay 3/30"
    assert STARVING_TRAINER_PID in {p.pid for p in view.frame.processes}


def test_the_view_ranks_the_verdicts_and_splits_each_trainers_time_once() -> None:
    h = History(600.0, 1.0)
    for i in range(5):
        h.add(make_frame(i))
    view = screen_view(h)
    assert view.frame is not None
    # The starving GPU leads, the unknown one follows; the panel draws them in this order.
    assert [v.state for v in view.verdicts] == ["busy_but_starving", "unknown"]
    assert view.top == [view.verdicts[0]]
    trainers = [p.pid for p, _ in view.trainer_waits]
    assert STARVING_TRAINER_PID in trainers
    for p, split in view.trainer_waits:
        assert p.role == "trainer"
        assert split == view.wait_split(p)
    # The window's split of the starving trainer: one point per tick that measured it.
    key = next(p.key for p, _ in view.trainer_waits if p.pid == STARVING_TRAINER_PID)
    series = view.split_series(key)
    assert len(series) == 5
    assert series[-1][1] == next(s for p, s in view.trainer_waits if p.key == key)


def test_the_view_says_where_each_job_may_run_and_how_much_it_was_throttled() -> None:
    h = History(600.0, 1.0)
    f = make_frame(0)
    limited = tuple(
        replace(p, cpus_allowed=(0, 1, 2, 3), cpu_quota=1.5)
        if p.role in ("trainer", "dataloader") and (p.trainer_pid or p.pid) == STARVING_TRAINER_PID
        else p
        for p in f.processes
    )
    h.add(replace(f, processes=limited))
    view = screen_view(h)
    job = next(j for j in view.jobs if j.pid == STARVING_TRAINER_PID)
    assert job.cpus == (0, 1, 2, 3) and job.cpus_text == "0-3" and job.quota == 1.5
