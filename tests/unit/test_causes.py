"""The causes: each in one documented precedence, and the classifier names the first that
holds, on hand-made aggregates where several do."""

from __future__ import annotations

import re
from pathlib import Path

from gputop.model.causes import CAUSE_PRECEDENCE
from gputop.model.diagnosis import classify
from gputop.model.frame import CAUSES
from gputop.model.thresholds import Thresholds
from tests.aggregates import gpu, host, job, other, took, trainer, worker

DOC = Path(__file__).resolve().parents[2] / "docs" / "diagnosis.md"
T = Thresholds()
# Measured: the trainer waits for batches 61%, its workers for a CPU 69% behind a hog.
STARVED = job(
    trainer(offcpu_pct=97.5, runq_pct=10.4, wait_input_pct=61.0, wait_irq_pct=26.0),
    worker(4000, cpu_pct=40.0, runq_pct=69.0, preemptors=took((900, "stress", 80.0))),
    worker(4001, cpu_pct=40.0, runq_pct=69.0, preemptors=took((900, "stress", 80.0))),
    other(900, "stress", 99.0),
)
# Measured: the trainer waits for one slow worker, no CPU contention.
WAITS = job(
    trainer(offcpu_pct=96.4, runq_pct=1.2, wait_input_pct=53.0, wait_irq_pct=42.0),
    worker(4000, cpu_pct=98.0, runq_pct=0.3),
)
HOT = dict(throttle_share_pct=90.0, throttle_reasons=("hw_thermal_slowdown",))


def test_every_cause_has_one_place_in_the_precedence_and_the_docs_give_the_same_order() -> None:
    assert sorted(CAUSE_PRECEDENCE) == sorted(CAUSES) and len(set(CAUSE_PRECEDENCE)) == len(CAUSES)
    line = next(x for x in DOC.read_text().splitlines() if x.startswith("Precedence: "))
    assert tuple(re.findall(r"`(\w+)`", line)) == CAUSE_PRECEDENCE


def test_a_starved_job_on_a_throttled_gpu_is_starving_by_cpu_before_clocks() -> None:
    v = classify(gpu(**HOT), host(cpu_pct=99.0, running=7), STARVED, T)
    assert (v.state, v.cause) == ("busy_but_starving", "cpu_contention")


def test_a_throttled_gpu_whose_trainer_waits_for_input_is_throttled_clocks_before_input() -> None:
    assert classify(gpu(), host(), WAITS, T).cause == "input_compute"
    v = classify(gpu(**HOT), host(), WAITS, T)
    assert (v.state, v.cause) == ("throttled", "clocks")


def test_states_where_nothing_holds_the_gpu_back_have_no_cause() -> None:
    quiet = job(trainer(), worker(4000, cpu_pct=4.0))
    assert (
        classify(gpu(sm=88.0), host(), quiet, T).state,
        classify(gpu(sm=88.0), host(), quiet, T).cause,
    ) == ("ok", None)
    idle = classify(gpu(util=1.0, sm=0.0), host(), quiet, T)
    assert (idle.state, idle.cause) == ("idle", None)
    lost = classify(gpu(lost=True), host(), quiet, T)
    assert (lost.state, lost.cause) == ("unknown", None)
    assert classify(gpu(), host(), quiet, T).cause == "gpu_side"
