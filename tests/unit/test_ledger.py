"""Lost GPU time added up frame by frame (``lost_gpu_s`` per GPU and cause), counted once per
GPU, the same from a recorded timeline as live, and what it costs at a price."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gputop.errors import UsageError
from gputop.model.frame import Cause, Frame, GpuSample, HostSample, Sources, Verdict
from gputop.model.ledger import GpuPrices, LostLedger, check_price, gpu_loss, restamped

T0 = 1763769600.0
H100 = "NVIDIA H100 80GB HBM3"


def _gpu(index: int, name: str = H100) -> GpuSample:
    return GpuSample(
        index=index, uuid=f"GPU-{index}", name=name, util=97.0, sm_active=10.0,
        power_w=150.0, power_limit_w=700.0, mem_used_mib=1, mem_total_mib=2,
    )  # fmt: skip


def _frame(
    i: int, verdicts: dict[int, tuple[Cause | None, float | None]], n_gpus: int = 1
) -> Frame:
    return Frame(
        t=T0 + 0.5 * i,
        interval=0.5,
        sources=Sources("nvml", "bpf"),
        host=HostSample(cpu_pct=50.0, ncpu=2, load1=1.0),
        gpus=tuple(_gpu(k) for k in range(n_gpus)),
        verdicts=tuple(
            Verdict(gpu=k, state="busy_but_starving", cause=c, lost_pct=pct)
            for k, (c, pct) in verdicts.items()
        ),
    )


def test_each_frame_adds_its_interval_times_the_lost_share_to_the_verdicts_cause() -> None:
    ledger = LostLedger()
    seen = [
        ledger.stamp(_frame(0, {0: (None, None)})),
        ledger.stamp(_frame(1, {0: ("cpu_contention", 40.0)})),
        ledger.stamp(_frame(2, {0: ("cpu_contention", 60.0)})),
        ledger.stamp(_frame(3, {0: ("cpu_limit", 80.0)})),
    ]
    assert seen[0].gpus[0].lost_gpu_s == {}
    assert seen[1].gpus[0].lost_gpu_s == {"cpu_contention": 0.2}
    assert seen[3].gpus[0].lost_gpu_s == {"cpu_contention": 0.5, "cpu_limit": 0.4}
    # Counted from the start of the first frame's interval, whatever came later.
    assert {f.gpus[0].lost_since for f in seen} == {T0 - 0.5}


def test_a_gpu_counts_its_own_time_once_and_others_apart() -> None:
    ledger = LostLedger()
    for i in range(4):
        f = ledger.stamp(_frame(i, {0: ("cpu_contention", 50.0), 1: ("straggler", 25.0)}, n_gpus=2))
    assert f.gpus[0].lost_gpu_s == {"cpu_contention": 1.0}
    assert f.gpus[1].lost_gpu_s == {"straggler": 0.5}


def test_a_replayed_timeline_gives_the_live_totals_and_counts_only_its_window() -> None:
    ledger = LostLedger()
    live = [ledger.stamp(_frame(i, {0: ("cpu_contention", 33.3 + i)})) for i in range(20)]
    # Written and read back as a bundle holds them, then counted again from its first frame.
    back = [Frame.from_dict(json.loads(json.dumps(f.to_dict()))) for f in live]
    again = restamped(back)
    assert again[-1].gpus[0].lost_gpu_s == live[-1].gpus[0].lost_gpu_s
    assert again[-1].gpus[0].lost_since == live[-1].gpus[0].lost_since
    # A bundle of the last 10 frames: the window's own lost time, since its first frame.
    window = restamped(back[10:])
    got = window[-1].gpus[0].lost_gpu_s
    assert got is not None
    assert got["cpu_contention"] == pytest.approx(
        sum(0.5 * (33.3 + i) / 100 for i in range(10, 20))
    )
    assert window[-1].gpus[0].lost_since == T0 + 0.5 * 10 - 0.5


def test_the_frame_carries_lost_time_and_rejects_a_bad_one() -> None:
    f = LostLedger().stamp(_frame(1, {0: ("cpu_limit", 50.0)}))
    d = f.to_dict()
    assert d["gpus"][0]["lost_gpu_s"] == {"cpu_limit": 0.25}
    assert d["verdicts"][0]["lost_pct"] == 50.0
    assert Frame.from_dict(d) == f
    for bad, why in (
        ({"not_a_cause": 1.0}, "must be one of"),
        ({"cpu_limit": "1"}, "must be a number"),
        (["cpu_limit", 1.0], "must be an object"),
    ):
        d["gpus"][0]["lost_gpu_s"] = bad
        with pytest.raises(ValueError, match=why):
            Frame.from_dict(d)


def test_a_price_is_one_for_every_gpu_else_the_longest_matching_model_name() -> None:
    table = {"H100": 3.5, "h100 80gb hbm3": 4.0, "A10": 1.0}
    prices = GpuPrices.from_config(table)
    assert prices.price(H100) == 4.0
    assert prices.price("NVIDIA A10") == 1.0
    assert prices.price("NVIDIA L4") is None
    assert GpuPrices.from_config(table, flat=2.0).price(H100) == 2.0
    assert GpuPrices().price(H100) is None


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "3.5", True])
def test_a_price_that_is_not_a_positive_number_is_a_one_line_error(bad: object) -> None:
    with pytest.raises(UsageError, match="a price in USD per GPU-hour must be"):
        check_price(bad, "--gpu-price")


def test_what_the_lost_gpu_hours_cost_at_the_gpus_price() -> None:
    g = replace(_gpu(0), lost_gpu_s={"cpu_limit": 396.0, "cpu_contention": 1116.0}, lost_since=T0)
    loss = gpu_loss(g, GpuPrices(flat=3.5))
    assert loss is not None
    assert loss.by_cause == (("cpu_contention", 1116.0), ("cpu_limit", 396.0))
    assert loss.hours == pytest.approx(0.42)
    assert loss.usd == pytest.approx(1.47)
    assert gpu_loss(g, GpuPrices()).usd is None  # type: ignore[union-attr]
    assert gpu_loss(_gpu(0), GpuPrices()) is None
