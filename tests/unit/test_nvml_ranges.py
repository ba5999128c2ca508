"""Readings outside their range are dropped: ``valid`` keeps good values and drops NVML's
"unavailable" sentinels."""

from __future__ import annotations

import pytest

from gputop.sources.nvml_decode import valid


@pytest.mark.parametrize(
    ("value", "most", "expected"),
    [
        (0, 100.0, 0),
        (100, 100.0, 100),
        (100.5, 100.0, None),
        (0xFFFFFFFF, None, None),
        (0xFFFFFFFFFFFFFFFF, None, None),
        (-1, None, None),
        (None, 100.0, None),
        (350_000, None, 350_000),
    ],
)
def test_valid_keeps_readings_and_drops_sentinels(
    value: float | None, most: float | None, expected: float | None
) -> None:
    assert valid(value, most) == expected
