"""The eBPF probe for system tests: why it cannot run here, one probe attached per test
module, and the ticks of a fresh sampler over fake GPUs with it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gputop.model.diagnosis import Diagnoser
from gputop.model.frame import Frame
from gputop.sampler import HostPass, Sampler
from gputop.sources.nvml import NvmlSource
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from gputop.sources.sched_probe import BpfSchedProbe
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


def attached_probe() -> Iterator[BpfSchedProbe]:
    """The body of a module-scoped fixture: a probe attached for the module's tests."""
    p = BpfSchedProbe()
    p.open()
    assert p.wait_attached(180), p.status
    yield p
    p.close()


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
