"""Cause family input, on hand-made aggregates: workers too slow for the trainer, or no workers
and the trainer builds its own batches (said with its measured share of time, never as a 0%
wait for batches)."""

from __future__ import annotations

from gputop.model import cause_input
from gputop.model.thresholds import Thresholds
from tests.aggregates import TRAINER, host, job, side, trainer, worker

T = Thresholds()


def test_a_trainer_waiting_for_one_slow_worker_is_input_compute_and_more_workers_fit() -> None:
    j = job(
        trainer(offcpu_pct=96.4, runq_pct=1.2, wait_input_pct=53.0, wait_irq_pct=42.0),
        worker(4000, cpu_pct=98.0, runq_pct=0.3),
    )
    h = host(cpu_pct=54.0, ncpu=8)
    hs = side(j, h)
    assert hs.input and not hs.starved
    v = cause_input.waits_for_input(j, h, hs, ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", "input_compute")
    assert f"trainer pid {TRAINER} waited for batches 53% of the last 10 s" in v.evidence[1]
    assert v.fixes[0] == "raise num_workers from 1 toward 7 (8 free CPUs minus the trainer)"


# num_workers=0 with its CUDA synchronization measured: 46% on a CPU outside it, 54% inside.
BUILDER = trainer(
    cpu_pct=46.0, offcpu_pct=54.0, runq_pct=0.5, wait_input_pct=0.0, wait_irq_pct=0.0,
    gpu_sync_pct=54.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=0.0,
)  # fmt: skip


def test_a_trainer_without_workers_builds_its_batches_with_its_measured_share_of_time() -> None:
    j = job(BUILDER)
    loader = cause_input.self_loading(j, T)
    assert loader is BUILDER
    v = cause_input.builds_its_own_batches(loader, j, host(), "GPU line", "10", T)
    assert (v.state, v.cause) == ("input_bound", "input_compute")
    assert v.evidence[1] == (
        f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 46% of"
        " the last 10 s outside CUDA synchronization, waited for a CPU 0%, and waited for the"
        " GPU 54% (inside CUDA synchronization; measured)"
    )
    assert "waited for batches" not in "\n".join(v.evidence)
    assert v.fixes[0].startswith("use DataLoader(num_workers=N) with N up to the 2 free CPU(s)")


def test_only_a_measured_trainer_without_workers_working_past_the_threshold_builds_its_own() -> (
    None
):
    assert cause_input.self_loading(job(BUILDER, worker(4000)), T) is None, "it has workers"
    unmeasured = trainer(cpu_pct=46.0, offcpu_pct=54.0, wait_input_pct=0.0)
    assert cause_input.self_loading(job(unmeasured), T) is None, "its GPU wait is not measured"
    launcher = trainer(offcpu_pct=94.0, wait_input_pct=0.0, gpu_sync_pct=90.0)
    assert cause_input.self_loading(job(launcher), T) is None, "6% on a CPU: it only launches"


def test_under_proc_a_busy_trainer_without_workers_is_said_to_build_its_batches_inferred() -> None:
    busy = trainer(cpu_pct=98.0, offcpu_pct=3.0, runq_pct=1.0)
    v = cause_input.busy_without_workers(job(busy), host(), T, "GPU line")
    assert v is not None and (v.state, v.cause) == ("input_bound", "input_compute")
    assert v.evidence[1].startswith(
        f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 98%"
    )
    assert "inferred" in v.evidence[1]
    assert cause_input.busy_without_workers(job(busy, worker(4000)), host(), T, "") is None
    assert cause_input.busy_without_workers(job(trainer()), host(), T, "") is None


# Two workers reading a slow disk: asleep in D 70% of the time, 3% on a CPU.
STORAGE = (
    trainer(offcpu_pct=95.0, runq_pct=1.0, wait_input_pct=78.0, wait_irq_pct=10.0),
    worker(4000, cpu_pct=3.0, offcpu_pct=97.0, runq_pct=0.5, io_wait_pct=72.0),
    worker(4001, cpu_pct=2.0, offcpu_pct=98.0, runq_pct=0.5, io_wait_pct=68.0),
)


def test_workers_in_io_wait_make_the_input_wait_on_storage_with_the_fixes_that_hide_it() -> None:
    j = job(*STORAGE)
    h = host(cpu_pct=12.0, ncpu=2)
    hs = side(j, h)
    assert hs.input and not hs.starved
    v = cause_input.waits_for_input(j, h, hs, ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", "input_storage")
    text = "\n".join(v.evidence)
    assert "in I/O wait (uninterruptible sleep, mostly disk reads) 70% of the time each" in text
    assert "on a CPU 2% (measured)" in text
    assert v.fixes[0].startswith("raise num_workers from 2 toward 4: workers waiting on storage")
    assert "more of them than the 2 free CPU(s)" in v.fixes[0]
    assert any("prefetch_factor" in f for f in v.fixes)
    assert any("local or cached copy" in f for f in v.fixes)
    assert not any("cheaper" in f for f in v.fixes), v.fixes


def test_workers_on_a_cpu_more_than_in_io_wait_or_unmeasured_stay_input_compute() -> None:
    t, _, _ = STORAGE
    h = host(cpu_pct=60.0, ncpu=4)
    mixed = job(t, worker(4000, cpu_pct=60.0, io_wait_pct=35.0))
    unmeasured = job(t, worker(4000, cpu_pct=3.0, offcpu_pct=97.0))
    low = job(t, worker(4000, cpu_pct=3.0, offcpu_pct=97.0, io_wait_pct=25.0))
    for j in (mixed, unmeasured, low):
        v = cause_input.waits_for_input(j, h, side(j, h), ("GPU line",), T)
        assert (v.state, v.cause) == ("input_bound", "input_compute"), j.workers


def test_the_storage_the_workers_read_is_named_and_a_network_one_gets_its_own_fix() -> None:
    from dataclasses import replace

    from gputop.model.frame import OpenStorage

    nfs = OpenStorage("/datasets", "nfs4", "filer:/export/imagenet")
    loop = OpenStorage("", "block device", "/dev/loop3")
    t, w1, w2 = STORAGE
    # Seen in 6 ticks on one worker and 2 on the other: the NFS mount is named first.
    j = job(t, replace(w1, storage=((nfs, 6),)), replace(w2, storage=((loop, 1), (nfs, 1))))
    h = host(cpu_pct=12.0, ncpu=2)
    v = cause_input.waits_for_input(j, h, side(j, h), ("GPU line",), T)
    text = "\n".join(v.evidence)
    assert (
        "; reading from /datasets (nfs4 on filer:/export/imagenet), /dev/loop3 (block device)"
        in text
    ), text
    assert v.fixes[-1].startswith(
        "stage the dataset from /datasets (nfs4 on filer:/export/imagenet), a network"
        " filesystem, onto local NVMe"
    ), v.fixes
    local = job(t, replace(w1, storage=((loop, 3),)), w2)
    v = cause_input.waits_for_input(local, h, side(local, h), ("GPU line",), T)
    assert "; reading from /dev/loop3 (block device)" in "\n".join(v.evidence)
    assert v.fixes[-1].startswith("read the data from somewhere faster than /dev/loop3")
