"""The job's host side on hand-made aggregates: the trainer's line says what it waits on, and
a trainer without workers is never said to wait for batches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.aggregates import TRAINER, job, side, took, trainer, worker

MEASURED = dict(offcpu_pct=55.0, runq_pct=1.0, wait_input_pct=0.0, wait_irq_pct=44.0)
SYNC = dict(gpu_sync_pct=54.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=0.0)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        pytest.param(
            {**MEASURED, **SYNC},
            f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 45%"
            " of the last 10 s outside CUDA synchronization (its batches and its other work),"
            " waited for a CPU 1%, waited for the GPU 54% (inside CUDA synchronization; measured)",
            id="measured-with-cuda",
        ),
        pytest.param(
            MEASURED,
            f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 45%"
            " of the last 10 s (its batches and its other work; a spinning wait for the GPU would"
            " count here too), waited for a CPU 1%, woken by interrupts (GPU, timers) 44%",
            id="measured",
        ),
        pytest.param(
            dict(offcpu_pct=55.0, runq_pct=1.0),
            f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 45%"
            " of the last 10 s, waiting for a CPU 1%, asleep 54% (on its GPU or its storage:"
            " inferred, not measured: the wait split needs the eBPF probe (gputop doctor))",
            id="proc",
        ),
    ],
)
def test_a_trainer_without_workers_is_said_to_build_its_batches_with_its_share_of_time(
    kw: dict[str, float], expected: str
) -> None:
    hs = side(job(trainer(**kw)))
    assert hs.builds_own and hs.lines[0] == expected
    assert "waited for batches" not in hs.lines[0]


def test_a_trainer_with_workers_is_said_to_wait_for_its_batches() -> None:
    hs = side(job(trainer(**MEASURED, wait_other_pct=0.0), worker(4000)))
    assert not hs.builds_own
    assert hs.lines[0].startswith(f"trainer pid {TRAINER} waited for batches 0% of the last 10 s")


def test_a_process_is_named_behind_the_workers_only_for_its_share_of_the_whole_jobs_wait() -> None:
    # 40% of the workers' little wait, but 1% of the job's: the trainer waited far longer.
    t = trainer(offcpu_pct=97.0, runq_pct=60.0, wait_input_pct=30.0, runq_threads_pct=900.0)
    t = replace(t, preemptors=took((901, "cron", 0.0)))
    ws = [
        worker(pid, runq_pct=10.0, runq_threads_pct=10.0, preemptors=took((900, "make", 40.0)))
        for pid in (4000, 4001)
    ]
    hs = side(job(t, *ws))
    # Not named, but its part of their wait is said, by kind: the whole wait is accounted for.
    assert hs.lines[1].startswith(
        "its 2 DataLoader workers waited for a CPU 10% of the time (who took it: other"
        " processes 40%, charged to no recorded process 60%),"
    )
    assert "pid 900" not in "\n".join(hs.lines)
    loud = [replace(w, preemptors=took((900, "make", 40.0))) for w in ws]
    hs = side(job(replace(t, runq_threads_pct=20.0), *loud))
    assert (
        "(who took it: pid 900 make 40%; the rest: charged to no recorded process 60%)"
        in hs.lines[1]
    ), "20% of the job's wait: named"
