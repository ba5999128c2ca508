"""The eBPF probe for system tests: why it cannot run here, the fixtures ``probe`` (one
probe attached per test module) and ``cuda_lib`` (the fake ``libcuda`` its CUDA uprobes
find), a process's row in a frame, and the ticks of a fresh sampler over fake GPUs with it.

tests/conftest.py loads this module as a plugin, so a test names either fixture as an
argument without importing it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from gputop.model.diagnosis import Diagnoser
from gputop.model.frame import Frame, ProcessSample
from gputop.sampler import HostPass, Sampler
from gputop.sources.nvml import NvmlSource
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakecuda import build_fake_cuda
from tests.fakenvml import FakeGpu, FakeNvml


def probe_unavailable() -> str | None:
    """Why the eBPF probe cannot run here (not root, or what its preflight found); None: it can."""
    if os.geteuid() != 0:
        return "the eBPF probe needs root"
    pre = preflight()
    return pre.reason if isinstance(pre, Unavailable) else None


def needs_probe(*more: pytest.MarkDecorator) -> list[pytest.MarkDecorator]:
    """A module's ``pytestmark``: root, these marks, skipped where the probe cannot run."""
    why = probe_unavailable()
    return [pytest.mark.root, *more, pytest.mark.skipif(why is not None, reason=str(why))]


@pytest.fixture(scope="module")
def probe() -> Iterator[BpfSchedProbe]:
    """A probe attached once for the module's tests."""
    p = BpfSchedProbe()
    p.open()
    assert p.wait_attached(180), p.status
    yield p
    p.close()


@pytest.fixture(scope="module")
def cuda_lib() -> Path:
    """The fake ``libcuda.so.1`` (tests/fakecuda/), built once for the module's tests."""
    return build_fake_cuda()


def row_of(frame: Frame, pid: int) -> ProcessSample | None:
    """``pid``'s row in ``frame``; None where the frame does not show it."""
    return next((p for p in frame.processes if p.pid == pid), None)


def tick_until(sampler: Sampler, done: Callable[[Frame], object], limit: int = 20) -> None:
    """Ticks ``sampler`` one interval apart until ``done`` accepts a frame, at most ``limit``."""
    for _ in range(limit):
        time.sleep(sampler.interval_s)
        if done(sampler.tick()):
            return
    raise AssertionError(f"not reached within {limit} ticks")


def sampled(
    directory: Path, gpus: Sequence[FakeGpu], probe: BpfSchedProbe, ticks: int, tick_s: float = 1.0
) -> list[Frame]:
    """``ticks`` frames of a new sampler and diagnoser, ``tick_s`` apart, seeing ``gpus``
    through the fake NVML (made in ``directory``) and the host through /proc and ``probe``."""
    fake = FakeNvml(directory / "nvml", list(gpus))
    fake.activate()
    sampler = Sampler(
        gpu=NvmlSource(),
        procs=HostPass(top_n=100_000),
        probe=probe,
        diagnoser=Diagnoser(),
        interval_s=tick_s,
    )
    frames = []
    try:
        sampler.gpu.open()
        next_at = time.monotonic()
        for _ in range(ticks):
            time.sleep(max(0.0, next_at - time.monotonic()))
            began = time.monotonic()
            frames.append(sampler.tick())
            # As the sampler's own loop schedules: after a late tick the next one comes at
            # once, never a burst of ticks milliseconds apart to catch up.
            next_at = max(began + tick_s, time.monotonic())
    finally:
        sampler.gpu.close()
    return frames
