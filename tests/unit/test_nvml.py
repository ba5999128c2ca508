"""Throttle (clock event) reason bits decoded to names, unknown bits kept."""

from __future__ import annotations

from gputop.sources.nvml_decode import decode_throttle
from tests.fakenvml import GPU_IDLE, SW_POWER_CAP


def test_decode_throttle_names_every_reason_and_keeps_unknown_bits() -> None:
    assert decode_throttle(0xFF) == (
        "applications_clocks",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
    )
    assert decode_throttle(GPU_IDLE) == ()
    assert decode_throttle(0x1000 | SW_POWER_CAP) == ("sw_power_cap", "unknown_0x1000")
