"""The words a user decides with: what a cause costs and the lost GPU-hours, with money."""

from __future__ import annotations

import time
from dataclasses import replace

from gputop.model.frame import LostPart, Verdict
from gputop.model.ledger import GpuLoss
from gputop.widgets.verdict_panel import cost_line, hours_text, loss_line, money_text

T = time.mktime((2026, 11, 28, 10, 12, 0, 0, 0, -1))


def test_the_cost_sentence_names_the_cause_its_share_and_the_speedup_bound() -> None:
    v = Verdict(0, "busy_but_starving", cause="cpu_contention", lost_pct=38.0, speedup_max=1.61)
    assert cost_line(v, alone=True) == (
        "CPU contention costs this GPU 38% of its time; without it the job could run up to"
        " 1.6x faster"
    )
    limit = Verdict(3, "busy_but_starving", cause="cpu_limit", lost_pct=72.3, speedup_max=12.2)
    assert cost_line(limit, alone=False) == (
        "Its CPU limit costs GPU 3 72% of its time; without it the job could run up to 12x faster"
    )
    assert cost_line(Verdict(0, "ok"), alone=True) is None
    # A share resting on a model of the job, not a measurement, says so.
    clocks = Verdict(
        0, "throttled", cause="clocks", lost_pct=24.0, speedup_max=1.32,
        lost_split=(LostPart("clocks", "slowed clocks", 24.0, "clocks", measured=False),),
    )  # fmt: skip
    assert cost_line(clocks, alone=True) == (
        "Slowed clocks cost this GPU 24% of its time; without it the job could run up to 1.3x"
        " faster (inferred)"
    )
    parts = (
        LostPart("cpu_wait", "CPU wait", 10.0, "cpu_contention"),
        LostPart("batches", "batches", 28.0, "cpu_contention", measured=False),
        LostPart("rest", "the rest", 62.0, measured=False),
    )
    assert (cost_line(replace(v, lost_split=parts), alone=True) or "").endswith(
        "1.6x faster (partly inferred)"
    )
    assert (cost_line(replace(v, lost_split=parts[:1]), alone=True) or "").endswith("faster")
    assert cost_line(Verdict(0, "low_sm_efficiency", cause="gpu_side"), alone=True) is None


def test_lost_gpu_hours_since_gputop_started_with_money_only_at_a_price() -> None:
    loss = GpuLoss(0, (("cpu_contention", 1512.0),), T, 3.5)
    assert loss_line(loss, T + 3600) == "0.42 GPU-hours lost since 10:12 ($1.47 at $3.50/h)"
    free = GpuLoss(0, (("cpu_contention", 1512.0),), T, None)
    assert loss_line(free, T + 3600) == "0.42 GPU-hours lost since 10:12"
    # Over several causes, each cause's GPU-hours (and, on the trainer's page, its share).
    two = GpuLoss(0, (("cpu_contention", 1116.0), ("cpu_limit", 396.0)), T, None)
    assert loss_line(two, T + 60).endswith(": CPU contention 0.31, its CPU limit 0.11")
    assert loss_line(two, T + 60, shares=True).endswith(
        ": CPU contention 0.31 (74%), its CPU limit 0.11 (26%)"
    )
    # Counting that began on another day says the day.
    assert " since Nov 28 10:12" in (loss_line(loss, T + 86400) or "")
    assert loss_line(GpuLoss(0, (), T, 3.5), T) is None


def test_small_amounts_keep_two_significant_digits() -> None:
    assert hours_text(0.0021) == "0.0021"
    assert hours_text(0.42) == "0.42"
    assert hours_text(12.34) == "12.3"
    assert money_text(0.0084) == "$0.0084"
    assert money_text(1.47) == "$1.47"
    assert money_text(12345.6) == "$12,345.60"
