"""The probe's per-interval accounting, pure: kernel map rows (built here) in, deltas out.

No root, no kernel, no clock: each test writes the rows the probe would have read
and checks what one interval's ``ProbeReading`` says.
"""

from __future__ import annotations

from dataclasses import replace

from gputop.model.probe_abi import (
    HIST_SLOTS,
    WAKE_CLASSES,
    WAKE_COLLECTIVE,
    WAKE_H2D,
    WAKE_INPUT,
    WAKE_IRQ,
    WAKE_NET,
    WAKE_NONE,
    WAKE_OTHER,
    GroupT,
    ThreadT,
)
from gputop.model.readings import ProbeRows
from gputop.model.sched_intervals import SchedIntervals

MS = 1_000_000


def thread(tgid: int, **kw: object) -> ThreadT:
    """A thread_t row: running totals as the kernel keeps them."""
    t = ThreadT(tgid=tgid)
    for k, v in kw.items():
        if k == "wait_ns":
            assert isinstance(v, dict)
            for cls, ns in v.items():
                t.wait_ns[cls] = ns
        else:
            setattr(t, k, v)
    return t


def group(**kw: object) -> GroupT:
    g = GroupT()
    for k, v in kw.items():
        if k == "hist":
            assert isinstance(v, dict)
            for slot, n in v.items():
                g.hist[slot] = n
        else:
            setattr(g, k, v)
    return g


def rows(
    now_ms: int,
    threads: dict[int, ThreadT],
    groups: dict[int, GroupT] | None = None,
    preempt: dict[tuple[int, int], tuple[int, int]] | None = None,
    woke: dict[tuple[int, int], int] | None = None,
    dt_ms: int = 1000,
    epoch: int = 0,
    watched: tuple[int, ...] = (),
) -> ProbeRows:
    return ProbeRows(
        now_ns=now_ms * MS,
        dt_ns=dt_ms * MS,
        ended_epoch=epoch,
        threads=list(threads.items()),
        groups=list((groups or {}).items()),
        preempt=preempt or {},
        woke=woke or {},
        watched=frozenset(watched),
    )


def test_an_interval_is_the_difference_of_running_totals() -> None:
    acc = SchedIntervals()
    first = acc.update(rows(1000, {10: thread(10, runq_ns=5 * MS, oncpu_ns=50 * MS, nivcsw=3)}))
    assert first.per_tid == {} and first.per_tgid == {}, "a first sighting is only a baseline"
    later = thread(10, runq_ns=25 * MS, oncpu_ns=650 * MS, nivcsw=8, nvcsw=4, blocked_ns=80 * MS)
    r = acc.update(rows(2000, {10: later}))
    t = r.per_tid[10]
    assert (t.runq_ns, t.oncpu_ns, t.blocked_ns, t.nivcsw, t.nvcsw) == (
        20 * MS,
        600 * MS,
        80 * MS,
        5,
        4,
    )
    assert r.per_tgid[10].oncpu_ns == 600 * MS
    assert r.dt_ns == 1000 * MS


def test_a_stretch_in_progress_is_credited_up_to_the_read_and_not_again() -> None:
    acc = SchedIntervals()
    # Runnable (preempted) since 900 ms: 100 ms of run-queue wait by the read at 1000.
    acc.update(rows(1000, {10: thread(10, nivcsw=1, out_ts=900 * MS, runnable=1)}))
    r = acc.update(rows(2000, {10: thread(10, nivcsw=1, out_ts=900 * MS, runnable=1)}))
    assert r.per_tid[10].runq_ns == 1000 * MS, "the whole second interval waited"
    # It got the CPU at 2100 and the kernel booked the 1200 ms stretch at once.
    done = thread(10, nivcsw=1, runq_ns=1200 * MS, in_ts=2100 * MS)
    r = acc.update(rows(3000, {10: done}))
    assert r.per_tid[10].runq_ns == 100 * MS
    assert r.per_tid[10].oncpu_ns == 900 * MS


def test_a_blocked_stretch_splits_at_its_wakeup_like_run_delay() -> None:
    acc = SchedIntervals()
    t = thread(10, nvcsw=1, out_ts=100 * MS, wake_ts=0, wake_class=WAKE_NONE)
    acc.update(rows(100, {10: t}))
    woken = thread(10, nvcsw=1, out_ts=100 * MS, wake_ts=700 * MS, wake_class=WAKE_IRQ)
    r = acc.update(rows(1100, {10: woken}))
    d = r.per_tid[10]
    assert d.blocked_ns == 600 * MS and d.runq_ns == 400 * MS
    assert d.wait_irq_ns == 600 * MS and d.wait_pending_ns == 0


def test_a_wakeup_pending_across_the_boundary_is_reported_once_then_classed_whole() -> None:
    acc = SchedIntervals()
    asleep = thread(10, nvcsw=1, out_ts=500 * MS)
    acc.update(rows(500, {10: asleep}))
    r1 = acc.update(rows(1500, {10: asleep}))
    # Nobody has woken it: the 1000 ms are pending, in no class.
    assert r1.per_tid[10].wait_pending_ns == 1000 * MS
    assert r1.per_tid[10].wait_input_ns == 0 and r1.per_tid[10].blocked_ns == 1000 * MS
    # Its worker wakes it at 1800; it runs at 1800 (no run-queue wait).
    done = thread(
        10,
        nvcsw=1,
        blocked_ns=1300 * MS,
        wait_ns={WAKE_INPUT: 1300 * MS},
        in_ts=1800 * MS,
    )
    r2 = acc.update(rows(2500, {10: done}))
    d = r2.per_tid[10]
    # The whole stretch lands in its class now; the pending part is not reported again.
    assert d.wait_input_ns == 1300 * MS
    assert d.wait_pending_ns == 0
    assert d.blocked_ns == 300 * MS
    assert d.wait_totals_ns == (1300 * MS, 0, 0, 0)


def test_a_thread_born_inside_an_interval_waits_one_read() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, oncpu_ns=MS, nivcsw=1)}))
    both = {10: thread(10, oncpu_ns=501 * MS, nivcsw=2), 11: thread(10, oncpu_ns=300 * MS, nvcsw=1)}
    r = acc.update(rows(2000, both))
    assert 11 not in r.per_tid, "its window started mid-interval"
    assert 10 in r.per_tid
    # Its process had been seen: the process's totals count the newcomer's time.
    assert r.per_tgid[10].oncpu_ns == 800 * MS
    r = acc.update(rows(3000, {10: both[10], 11: thread(10, oncpu_ns=350 * MS, nvcsw=2)}))
    assert r.per_tid[11].oncpu_ns == 50 * MS


def test_a_thread_that_exits_inside_an_interval_keeps_its_process_totals_whole() -> None:
    acc = SchedIntervals()
    live = {10: thread(10, oncpu_ns=100 * MS, nivcsw=1), 11: thread(10, oncpu_ns=200 * MS, nvcsw=1)}
    acc.update(rows(1000, live, {10: group()}))
    # Thread 11 ran 50 ms more, then exited: the kernel folded 250 ms into its group.
    after = {10: thread(10, oncpu_ns=150 * MS, nivcsw=2)}
    r = acc.update(rows(2000, after, {10: group(dead_oncpu_ns=250 * MS, dead_nvcsw=1)}))
    assert r.per_tgid[10].oncpu_ns == 100 * MS, "50 ms of each thread, none counted twice"
    assert 11 not in r.per_tid


def test_totals_that_go_backwards_are_a_new_entry_not_a_huge_delta() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, oncpu_ns=900 * MS, nivcsw=50)}))
    # The tid was reused by a new thread of another process.
    r = acc.update(rows(2000, {10: thread(20, oncpu_ns=5 * MS, nivcsw=1)}))
    assert 10 not in r.per_tid
    # Same process, but fewer switches than before: the entry was made again.
    acc2 = SchedIntervals()
    acc2.update(rows(1000, {10: thread(10, oncpu_ns=900 * MS, nivcsw=50)}))
    r = acc2.update(rows(2000, {10: thread(10, oncpu_ns=10 * MS, nivcsw=2)}))
    assert r.per_tid[10].oncpu_ns == 10 * MS
    r = acc2.update(rows(3000, {10: thread(10, oncpu_ns=30 * MS, nivcsw=4)}))
    assert r.per_tid[10].oncpu_ns == 20 * MS


def test_a_read_caught_mid_store_costs_precision_never_a_double_count() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, oncpu_ns=100 * MS, runq_ns=50 * MS, nivcsw=5)}))
    # runq_ns read a little low this time (the probe had not stored it yet).
    r = acc.update(rows(2000, {10: thread(10, oncpu_ns=600 * MS, runq_ns=40 * MS, nivcsw=6)}))
    assert r.per_tid[10].runq_ns == 0
    r = acc.update(rows(3000, {10: thread(10, oncpu_ns=700 * MS, runq_ns=70 * MS, nivcsw=7)}))
    assert r.per_tid[10].runq_ns == 20 * MS, "diffed against the higher total, 50 ms"


def test_a_missed_tick_gives_the_longer_interval_in_one_reading() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, oncpu_ns=0, nivcsw=1)}))
    r = acc.update(rows(3000, {10: thread(10, oncpu_ns=1500 * MS, nivcsw=9)}, dt_ms=2000))
    assert r.dt_ns == 2000 * MS
    assert r.per_tid[10].oncpu_ns == 1500 * MS


def test_the_histogram_of_a_row_made_inside_the_interval_counts_from_zero() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nivcsw=1)}))
    r = acc.update(rows(2000, {10: thread(10, nivcsw=2)}, {10: group(hist={25: 3})}))
    hist = r.per_tgid[10].hist
    assert hist is not None and len(hist) == HIST_SLOTS and hist[25] == 3 and sum(hist) == 3
    r = acc.update(rows(3000, {10: thread(10, nivcsw=3)}, {10: group(hist={25: 4, 3: 1})}))
    hist = r.per_tgid[10].hist
    assert hist is not None and hist[25] == 1 and hist[3] == 1


def test_the_longest_stretch_is_the_one_ended_in_the_closed_epoch() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nivcsw=1)}))
    t = thread(10, nivcsw=2)
    t.longest_ns[1], t.longest_ep[1] = 40 * MS, 1
    t.longest_ns[0], t.longest_ep[0] = 99 * MS, 0
    assert acc.update(rows(2000, {10: t}, epoch=1)).per_tid[10].longest_offcpu_ns == 40 * MS
    # Slot 0 holds epoch 0's, not epoch 2's: nothing ended in epoch 2 yet.
    assert acc.update(rows(3000, {10: t}, epoch=2)).per_tid[10].longest_offcpu_ns == 0


def test_preemptors_only_for_processes_watched_through_the_interval() -> None:
    acc = SchedIntervals()
    preempt = {(10, 900): (100 * MS, 10), (10, 41): (MS, 1), (20, 900): (5 * MS, 1)}
    acc.update(rows(1000, {}, preempt=preempt, watched=(10,)))
    more = {(10, 900): (700 * MS, 70), (10, 41): (MS, 1), (20, 900): (50 * MS, 9)}
    r = acc.update(rows(2000, {}, preempt=more, watched=(10, 30)))
    assert [(p.pid, p.ns, p.count) for p in r.preemptors[10]] == [(900, 600 * MS, 60)]
    assert r.preemptors[30] == (), "watched and never preempted: measured, empty"
    assert 20 not in r.preemptors, "not watched through the interval"


def test_other_process_wakers_are_deltas_with_the_woken_stretch_in_progress() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}, woke={(10, 77): 100 * MS}))
    # A stretch woken by 77 at 1500 (out since 1200), not yet ended: 300 ms credited.
    t = thread(10, nvcsw=2, out_ts=1200 * MS, wake_ts=1500 * MS, wake_class=WAKE_OTHER)
    t.waker_tgid = 77
    r = acc.update(rows(2000, {10: t}, woke={(10, 77): 100 * MS}))
    assert r.per_tid[10].other_wakers == ((77, 300 * MS),)


def test_the_wake_classes_index_the_kernels_array() -> None:
    assert len(ThreadT().wait_ns) == WAKE_CLASSES


def test_time_inside_cuda_sync_is_the_gpus_in_every_state_and_not_in_another_class() -> None:
    from gputop.model.probe_abi import WAKE_SYNC

    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1, in_ts=900 * MS)}))
    # Entered a synchronize call at 1100 while on a CPU, spun 100 ms, blocked from 1200;
    # still blocked (inside the call) at the read: no pending, all of it the GPU's.
    t = thread(10, nvcsw=2, oncpu_ns=300 * MS, sync_oncpu_ns=100 * MS, out_ts=1200 * MS)
    t.sync_depth, t.sync_since = 1, 1100 * MS
    r = acc.update(rows(2000, {10: t}))
    d = r.per_tid[10]
    assert d.sync_ns == 900 * MS
    assert d.sync_oncpu_ns == 100 * MS
    assert d.wait_sync_ns == 800 * MS and d.wait_pending_ns == 0 and d.wait_irq_ns == 0
    # It returned at 2300 (the kernel booked the blocked part as WAKE_SYNC).
    done = thread(
        10,
        nvcsw=2,
        oncpu_ns=300 * MS,
        blocked_ns=1100 * MS,
        wait_ns={WAKE_SYNC: 1100 * MS},
        sync_ns=1200 * MS,
        sync_oncpu_ns=100 * MS,
        in_ts=2300 * MS,
    )
    r = acc.update(rows(3000, {10: done}))
    d = r.per_tid[10]
    assert d.sync_ns == 300 * MS and d.wait_sync_ns == 300 * MS
    assert d.oncpu_ns == 700 * MS and d.sync_oncpu_ns == 0


def test_the_run_queue_after_an_input_wakeup_is_kept_apart() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}))
    # Blocked since 1200, woken by its worker at 1500, still waiting for a CPU at 2000.
    t = thread(10, nvcsw=2, out_ts=1200 * MS, wake_ts=1500 * MS, wake_class=WAKE_INPUT)
    d = acc.update(rows(2000, {10: t})).per_tid[10]
    assert d.wait_input_ns == 300 * MS and d.runq_ns == 500 * MS
    assert d.runq_after_input_ns == 500 * MS


def test_a_wait_ended_by_network_receive_processing_is_its_own_class_ended_or_in_progress() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}))
    # 300 ms in socket reads that ended; then blocked from 1500, woken by NET_RX at 1800.
    t = thread(
        10,
        nvcsw=3,
        blocked_ns=300 * MS,
        wait_ns={WAKE_NET: 300 * MS},
        out_ts=1500 * MS,
        wake_ts=1800 * MS,
        wake_class=WAKE_NET,
    )
    d = acc.update(rows(2000, {10: t})).per_tid[10]
    assert d.wait_net_ns == 600 * MS
    assert d.wait_irq_ns == d.wait_other_ns == d.wait_input_ns == d.wait_pending_ns == 0
    assert d.runq_ns == 200 * MS and d.blocked_ns == 600 * MS


def test_a_wait_ended_by_a_collective_thread_is_its_own_class_ended_or_in_progress() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}))
    # 200 ms in a collective that ended; then blocked from 1600, woken by gloo at 1900.
    t = thread(
        10,
        nvcsw=3,
        blocked_ns=200 * MS,
        wait_ns={WAKE_COLLECTIVE: 200 * MS},
        out_ts=1600 * MS,
        wake_ts=1900 * MS,
        wake_class=WAKE_COLLECTIVE,
    )
    d = acc.update(rows(2000, {10: t})).per_tid[10]
    assert d.wait_collective_ns == 500 * MS
    assert d.wait_thread_ns == d.wait_other_ns == d.wait_input_ns == 0
    assert d.runq_after_input_ns == 0 and d.runq_ns == 100 * MS


def test_take_gives_no_interval_for_rows_that_only_set_the_baselines() -> None:
    acc = SchedIntervals()
    first = rows(1000, {10: thread(10, oncpu_ns=50 * MS, nivcsw=3)})
    assert acc.take(None) is None, "no rows (probe loading or off): no interval"
    assert acc.take(replace(first, baseline_only=True)) is None
    r = acc.take(rows(2000, {10: thread(10, oncpu_ns=650 * MS, nivcsw=8)}))
    assert r is not None, "the baseline was taken: the next read is an interval"
    assert r.per_tid[10].oncpu_ns == 600 * MS


def test_the_reading_carries_what_the_probe_saw_besides_the_totals() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {}))
    later = rows(2000, {})
    r = acc.update(
        replace(
            later,
            cuda_tgids=frozenset({7}),
            active=frozenset({7, 8}),
            execd=frozenset({8}),
            map_errors=3,
        )
    )
    assert (r.cuda_tgids, r.active, r.execd, r.map_errors) == (
        frozenset({7}),
        frozenset({7, 8}),
        frozenset({8}),
        3,
    )


def test_a_throttled_stretch_is_run_queue_time_kept_apart_in_progress_and_after() -> None:
    acc = SchedIntervals()
    # Held back by its cgroup's limit since 900 ms (switched out throttled).
    acc.update(rows(1000, {10: thread(10, nivcsw=1, out_ts=900 * MS, runnable=1, throttled=1)}))
    r = acc.update(rows(2000, {10: thread(10, nivcsw=1, out_ts=900 * MS, runnable=1, throttled=1)}))
    assert (r.per_tid[10].runq_ns, r.per_tid[10].throttled_ns) == (1000 * MS, 1000 * MS)
    # Back on a CPU at 2050: the kernel booked the 1150 ms stretch as run-queue and throttled.
    done = thread(10, nivcsw=1, runq_ns=1150 * MS, throttled_ns=1150 * MS, in_ts=2050 * MS)
    r = acc.update(rows(3000, {10: done}))
    assert (r.per_tid[10].runq_ns, r.per_tid[10].throttled_ns) == (50 * MS, 50 * MS)
    # Then preempted at 3500 (not throttled): run-queue time only.
    pre = thread(10, nivcsw=2, runq_ns=1150 * MS, throttled_ns=1150 * MS, out_ts=3500 * MS,
                 runnable=1, throttled=0, oncpu_ns=1450 * MS)  # fmt: skip
    r = acc.update(rows(4000, {10: pre}, {10: group()}))
    assert (r.per_tid[10].runq_ns, r.per_tid[10].throttled_ns) == (500 * MS, 0)


def test_a_process_keeps_the_throttled_time_of_its_exited_threads() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nivcsw=1)}, {10: group()}))
    r = acc.update(
        rows(2000, {10: thread(10, nivcsw=1)}, {10: group(dead_runq_ns=300 * MS,
                                                           dead_throttled_ns=200 * MS)})
    )  # fmt: skip
    assert (r.per_tgid[10].runq_ns, r.per_tgid[10].throttled_ns) == (300 * MS, 200 * MS)


def test_uninterruptible_sleep_is_blocked_time_kept_apart_up_to_its_wakeup() -> None:
    acc = SchedIntervals()
    # Switched out in D (waiting for a read) at 900 ms, nobody has woken it yet.
    asleep = thread(10, nvcsw=1, out_ts=900 * MS, runnable=0, io_wait=1)
    acc.update(rows(1000, {10: asleep}))
    r = acc.update(rows(2000, {10: asleep}))
    assert (r.per_tid[10].blocked_ns, r.per_tid[10].io_wait_ns) == (1000 * MS, 1000 * MS)
    # Its disk's interrupt woke it at 2100, on a CPU at 2150: the D part ends at the wakeup.
    woken = thread(10, nvcsw=1, out_ts=900 * MS, runnable=0, io_wait=1, wake_ts=2100 * MS,
                   wake_class=WAKE_IRQ)  # fmt: skip
    r = acc.update(rows(2200, {10: woken}, dt_ms=200))
    assert (r.per_tid[10].blocked_ns, r.per_tid[10].io_wait_ns, r.per_tid[10].runq_ns) == (
        100 * MS,
        100 * MS,
        100 * MS,
    )
    # Then an ordinary sleep (S) since 2500: blocked, not I/O wait.
    slept = thread(10, nvcsw=2, blocked_ns=1200 * MS, io_wait_ns=1200 * MS, runq_ns=50 * MS,
                   oncpu_ns=350 * MS, out_ts=2500 * MS, runnable=0, io_wait=0)  # fmt: skip
    r = acc.update(rows(3000, {10: slept}, dt_ms=800))
    assert (r.per_tid[10].blocked_ns, r.per_tid[10].io_wait_ns) == (500 * MS, 0)


def test_a_process_keeps_the_io_wait_of_its_exited_threads() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}, {10: group()}))
    r = acc.update(
        rows(2000, {10: thread(10, nvcsw=1)}, {10: group(dead_blocked_ns=300 * MS,
                                                          dead_io_wait_ns=200 * MS)})
    )  # fmt: skip
    assert (r.per_tgid[10].blocked_ns, r.per_tgid[10].io_wait_ns) == (300 * MS, 200 * MS)


def test_time_inside_a_host_to_device_copy_is_the_copys_ended_or_in_progress() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {10: thread(10, nvcsw=1)}))
    # Copies that returned: 300 ms, 100 of it on a CPU, 50 queued, 150 blocked. Then one in
    # progress since 1700: on a CPU from 1700 until it blocked at 1800, asleep since.
    t = thread(
        10,
        nvcsw=3,
        oncpu_ns=400 * MS,
        blocked_ns=150 * MS,
        runq_ns=50 * MS,
        wait_ns={WAKE_H2D: 150 * MS},
        h2d_ns=300 * MS,
        h2d_oncpu_ns=100 * MS,
        h2d_runq_ns=50 * MS,
        h2d_depth=1,
        h2d_since=1700 * MS,
        out_ts=1800 * MS,
        wake_class=WAKE_NONE,
    )
    d = acc.update(rows(2000, {10: t})).per_tid[10]
    assert d.h2d_ns == 600 * MS, "300 ended + 300 in progress"
    assert (d.h2d_oncpu_ns, d.h2d_runq_ns) == (100 * MS, 50 * MS)
    # Blocked inside the copy is the copy's, never pending nor another class.
    assert d.wait_h2d_ns == 350 * MS and d.wait_pending_ns == 0
    assert d.wait_irq_ns == d.wait_other_ns == 0 and d.sync_ns == 0
