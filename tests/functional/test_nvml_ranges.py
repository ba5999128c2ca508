"""NVML readings outside their range become n/a (None) at the source, through the real
nvidia-ml-py on the fake NVML: "unavailable" sentinels and percentages over 100."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.sources.nvml import NvmlSource
from tests.fakenvml import FakeGpu, FakeNvml

SENTINEL = 4294967295  # NVML_VALUE_NOT_AVAILABLE of a 32-bit field


@pytest.fixture
def source(tmp_path: Path) -> Iterator[tuple[NvmlSource, FakeNvml]]:
    saved = {k: os.environ.get(k) for k in ("FAKE_NVML_SCENARIO", "FAKE_NVML_COUNTS")}
    fake = FakeNvml(
        tmp_path / "fake",
        [
            FakeGpu(
                util=[SENTINEL, 130, 97],
                mem_util=[SENTINEL, 101, 40],
                temperature_c=[SENTINEL, 60, 61],
                sm_clock_mhz=[SENTINEL, 1700, 1710],
                power_w=[SENTINEL / 1000.0, 300, 310],
            )
        ],
    )
    fake.activate()
    src = NvmlSource()
    src.open()
    yield src, fake
    src.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_unavailable_sentinels_and_over_100_percent_read_as_none(
    source: tuple[NvmlSource, FakeNvml],
) -> None:
    src, _ = source
    first, second, third = (src.read().gpus[0] for _ in range(3))
    # tick 0: every field the driver marked unavailable
    assert (first.util, first.mem_util, first.temperature_c) == (None, None, None)
    assert (first.sm_clock_mhz, first.power_w) == (None, None)
    # tick 1: percentages over 100 are not readings; the in-range fields are kept
    assert (second.util, second.mem_util) == (None, None)
    assert (second.temperature_c, second.sm_clock_mhz, second.power_w) == (60.0, 1700, 300.0)
    # tick 2: ordinary values pass untouched
    assert (third.util, third.mem_util, third.power_w) == (97.0, 40.0, 310.0)
    assert src.status.live
