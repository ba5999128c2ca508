"""The window's aggregates: gputop told by its command line, and preemptor shares weighed by
each process's whole run-queue time."""

from __future__ import annotations

import pytest

from gputop.model.frame import Frame, HostSample, Preemptor, ProcessSample, Sources
from gputop.model.window import aggregate_processes, is_gputop, merge_preemptors


@pytest.mark.parametrize(
    ("comm", "cmdline", "own"),
    [
        ("gputop", "/venv/bin/python /venv/bin/gputop record", True),
        ("python3", "/venv/bin/python3 -m gputop record --interval 0.5", True),
        ("python3", "python3 -u -m gputop.sources.bpf_child 5 100 probe.c", True),
        ("python", "/usr/bin/python /home/u/.local/bin/gputop", True),
        ("gputop", "gputop", True),
        # The demo's workload is the job a demo shows, not gputop's overhead.
        ("python3", "python3 -m gputop.demo.workload --scenario cpu-contention", False),
        ("python3", "python3 train.py --out /data/gputop", False),
        ("python3", "python3 -c import gputop", False),
        ("stress", "stress --cpu 4", False),
        ("kdamond.0", "", False),
    ],
)
def test_gputop_is_told_by_its_command_line(comm: str, cmdline: str, own: bool) -> None:
    assert is_gputop(comm, cmdline) is own


def test_merged_shares_are_of_the_total_weight_and_none_where_nothing_was_measured() -> None:
    a = (Preemptor(900, "stress", 50.0),)
    b = (Preemptor(900, "stress", 10.0), Preemptor(77, "kdamond.0", 1.0))
    merged = merge_preemptors([(100.0, a), (300.0, b), (50.0, None)])
    assert merged is not None
    assert [(p.pid, p.share_pct) for p in merged] == [(900, 20.0), (77, 0.8)]
    assert merge_preemptors([(10.0, None)]) is None
    assert merge_preemptors([(0.0, ())]) == ()


def _frame(t: float, runq: float, runq_threads: float | None, share: float) -> Frame:
    p = ProcessSample(
        pid=4000, ppid=1, comm="pt_data_worker", cmdline="python3 train.py", role="dataloader",
        trainer_pid=3821, cpu_pct=50.0, offcpu_pct=50.0, runq_pct=runq, preempt_per_s=1.0,
        preempt_total=0, vcsw_per_s=0.0, runq_threads_pct=runq_threads,
        preemptors=(Preemptor(900, "stress", share),),
    )  # fmt: skip
    me = ProcessSample(
        pid=5150, ppid=1, comm="python3", cmdline="python3 -m gputop record", role="other",
        trainer_pid=None, cpu_pct=3.0, offcpu_pct=97.0, runq_pct=0.0, preempt_per_s=0.0,
        preempt_total=0, vcsw_per_s=0.0,
    )  # fmt: skip
    return Frame(
        t=t,
        interval=1.0,
        sources=Sources("nvml", "bpf"),
        host=HostSample(cpu_pct=50.0, ncpu=2, load1=1.0),
        processes=(p, me),
    )


def test_a_processs_preemptors_over_the_window_weigh_each_tick_by_all_its_threads_wait() -> None:
    # Tick 1: its threads waited 300% (3 threads), 10% of it behind the hog; tick 2: 100%, 50%.
    # Its main thread's run queue (20% each tick) would weigh the ticks equally (30%).
    procs = aggregate_processes([_frame(1.0, 20.0, 300.0, 10.0), _frame(2.0, 20.0, 100.0, 50.0)])
    w = procs[4000]
    assert w.preemptors == (Preemptor(900, "stress", 20.0),)
    assert w.runq_threads_pct == 200.0 and not w.gputop
    assert procs[5150].gputop
    old = aggregate_processes([_frame(1.0, 20.0, None, 10.0), _frame(2.0, 20.0, None, 50.0)])
    assert old[4000].preemptors == (Preemptor(900, "stress", 30.0),), "older frames: main thread"
