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


def test_workers_on_a_cpu_most_of_the_time_are_input_compute_whatever_else_they_wait_on() -> None:
    t, _, _ = STORAGE
    h = host(cpu_pct=60.0, ncpu=4)
    # 60% on a CPU (35% in I/O wait); decoding on helper threads (the main thread waits on
    # them, the process uses 90% of a CPU); /proc alone, on a CPU most of the time.
    mixed = job(t, worker(4000, cpu_pct=60.0, offcpu_pct=40.0, io_wait_pct=35.0))
    threads = job(t, worker(4000, cpu_pct=90.0, offcpu_pct=85.0, io_wait_pct=0.0))
    proc = job(t, worker(4000, cpu_pct=75.0, offcpu_pct=25.0))
    for j in (mixed, threads, proc):
        v = cause_input.waits_for_input(j, h, side(j, h), ("GPU line",), T)
        assert (v.state, v.cause) == ("input_bound", "input_compute"), j.workers


def test_workers_that_mostly_wait_on_something_unmeasured_leave_the_cause_untold() -> None:
    t, _, _ = STORAGE
    h = host(cpu_pct=10.0, ncpu=4)
    # /proc alone: asleep 97% of the time, on what is not measured.
    unmeasured = job(t, worker(4000, cpu_pct=3.0, offcpu_pct=97.0))
    v = cause_input.waits_for_input(unmeasured, h, side(unmeasured, h), ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", None)
    text = "\n".join(v.evidence)
    assert "what holds its batches back cannot be told" in text, text
    assert "not measured under /proc alone: the eBPF probe tells them apart" in text, text
    assert v.fixes[0].startswith("run gputop as root with its eBPF probe"), v.fixes
    # Measured, but on neither a disk (25%) nor the network: a lock, a sleep (70%).
    other = job(t, worker(4000, cpu_pct=3.0, offcpu_pct=97.0, io_wait_pct=25.0, net_wait_pct=0.0))
    v = cause_input.waits_for_input(other, h, side(other, h), ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", None)
    assert "blocked on neither a disk nor the network 70%" in "\n".join(v.evidence)
    assert not any("cheaper" in f for f in v.fixes), v.fixes


# Two workers reading from a slow TCP server: blocked on the network 80% of the time.
REMOTE = (
    trainer(offcpu_pct=95.0, runq_pct=1.0, wait_input_pct=58.0, wait_irq_pct=30.0),
    worker(4000, cpu_pct=3.0, offcpu_pct=97.0, runq_pct=0.5, io_wait_pct=0.0, net_wait_pct=82.0),
    worker(4001, cpu_pct=2.0, offcpu_pct=98.0, runq_pct=0.5, io_wait_pct=0.0, net_wait_pct=78.0),
)


def test_workers_waiting_on_the_network_make_the_input_remote_named_by_its_peer() -> None:
    from dataclasses import replace

    from gputop.model.frame import NetPeer

    t, w1, w2 = REMOTE
    server = NetPeer("10.0.4.12", 9000)
    j = job(t, replace(w1, peers=((server, 5),)), replace(w2, peers=((server, 4),)))
    h = host(cpu_pct=8.0, ncpu=2)
    hs = side(j, h)
    assert hs.input and not hs.starved
    v = cause_input.waits_for_input(j, h, hs, ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", "input_remote")
    text = "\n".join(v.evidence)
    assert "waited on the network: blocked until a remote peer's data arrived 80% of the" in text
    assert "reading from 10.0.4.12:9000 (tcp)" in text, text
    assert v.fixes[0].startswith("raise num_workers from 2 toward 4: workers waiting on the")
    assert any("prefetch_factor" in f and "persistent_workers=True" in f for f in v.fixes)
    assert any("fewer, larger requests" in f for f in v.fixes)
    assert v.fixes[-1].startswith("a local cache: copy the dataset from 10.0.4.12:9000")
    assert not any("cheaper" in f for f in v.fixes), v.fixes


def test_workers_in_io_wait_on_a_network_filesystem_wait_on_its_server() -> None:
    from dataclasses import replace

    from gputop.model.frame import OpenStorage

    nfs = OpenStorage("/datasets", "nfs4", "filer:/export/imagenet")
    t, w1, w2 = STORAGE
    j = job(t, replace(w1, storage=((nfs, 6),), net_wait_pct=0.0), replace(w2, net_wait_pct=0.0))
    h = host(cpu_pct=12.0, ncpu=2)
    v = cause_input.waits_for_input(j, h, side(j, h), ("GPU line",), T)
    assert (v.state, v.cause) == ("input_bound", "input_remote")
    text = "\n".join(v.evidence)
    assert "a network filesystem served by filer" in text, text
    assert v.fixes[-1].startswith("a local cache: copy the dataset from /datasets (nfs4")


def test_the_storage_the_workers_read_is_named_most_seen_first() -> None:
    from dataclasses import replace

    from gputop.model.frame import OpenStorage

    nfs = OpenStorage("/datasets", "nfs4", "filer:/export/imagenet")
    loop = OpenStorage("", "block device", "/dev/loop3")
    t, w1, w2 = STORAGE
    # Seen in 1 tick on one worker and 3 on the other: the loop device is named first (the
    # workers' largest wait is that disk: input_storage), the NFS mount beside it.
    j = job(t, replace(w1, storage=((nfs, 1),)), replace(w2, storage=((loop, 3), (nfs, 1))))
    h = host(cpu_pct=12.0, ncpu=2)
    v = cause_input.waits_for_input(j, h, side(j, h), ("GPU line",), T)
    assert v.cause == "input_storage"
    text = "\n".join(v.evidence)
    assert (
        "; reading from /dev/loop3 (block device), /datasets (nfs4 on filer:/export/imagenet)"
        in text
    ), text
    assert v.fixes[-1].startswith("read the data from somewhere faster than /dev/loop3"), v.fixes
    unseen = job(*STORAGE)
    v = cause_input.waits_for_input(unseen, h, side(unseen, h), ("GPU line",), T)
    assert v.fixes[-1].startswith("read a local or cached copy of the data"), v.fixes
