"""The command line's interval floor is the sampler's."""

from __future__ import annotations


def test_cli_interval_floor_is_the_samplers() -> None:
    from gputop import cli, sampler

    assert cli.MIN_INTERVAL_S == sampler.MIN_INTERVAL_S
