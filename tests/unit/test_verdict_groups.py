"""GPUs with the same verdict are stated once; what differs per GPU follows; repeats go."""

from __future__ import annotations

from gputop.model.frame import Verdict
from gputop.model.verdict_groups import gpu_label, group_verdicts

FIXES = (
    "the GPU side is the cause: its kernels are memory- or communication-bound; profile them",
    "raise arithmetic intensity: larger batches, bf16/fp16 autocast, fused kernels",
)


def _gpu_side(gpu: int, util: int = 97) -> Verdict:
    return Verdict(
        gpu=gpu,
        state="low_sm_efficiency",
        cause="gpu_side",
        evidence=(
            f"GPU {gpu}: GPU_UTIL {util}%, SM activity 12%, efficiency 0.12 over the last 10 s",
            "SM activity 12% is far below GPU_UTIL: kernels are resident but most SMs idle",
        ),
        fixes=FIXES,
        efficiency=0.12,
    )


def test_gpu_labels_write_runs_as_ranges() -> None:
    assert gpu_label([3]) == "GPU 3"
    assert gpu_label(range(8)) == "GPU 0-7"
    assert gpu_label([0, 2, 5, 6, 7, 10]) == "GPU 0,2,5-7,10"


def test_eight_gpus_with_one_verdict_are_stated_once() -> None:
    (group,) = group_verdicts([_gpu_side(g) for g in range(8)])
    assert group.gpus == tuple(range(8)) and group.label == "GPU 0-7"
    assert group.evidence[0].startswith("GPU 0-7: GPU_UTIL 97%")
    assert group.differs == ()
    assert group.fixes == FIXES
    assert group.efficiency == 0.12


def test_what_differs_per_gpu_follows_with_the_gpus_that_have_it() -> None:
    verdicts = [_gpu_side(g, util=97 if g != 5 else 80) for g in range(8)]
    verdicts[7] = Verdict(
        gpu=7,
        state="low_sm_efficiency",
        cause="gpu_side",
        evidence=(*verdicts[7].evidence, "its trainer pid 900 has no DataLoader workers"),
        fixes=FIXES,
    )
    (group,) = group_verdicts(verdicts)
    # The shared line once; each other line once, with the GPUs that have it.
    assert group.evidence == (verdicts[0].evidence[1],)
    assert group.differs == (
        ((0, 1, 2, 3, 4, 6, 7), "GPU 0-4,6-7: GPU_UTIL 97%, SM activity 12%, efficiency 0.12"
         " over the last 10 s"),
        ((5,), verdicts[5].evidence[0]),
        ((7,), "GPU 7: its trainer pid 900 has no DataLoader workers"),
    )  # fmt: skip
    assert group.efficiency is None, "GPU 7 reports none: not the same for all"


def test_gpu_10_is_not_read_as_gpu_1() -> None:
    a = _gpu_side(1)
    b = Verdict(gpu=10, state=a.state, cause=a.cause, evidence=a.evidence, fixes=a.fixes)
    (group,) = group_verdicts([a, b])
    # GPU 10's copy of "GPU 1: ..." names another GPU: it is its own line, not shared.
    assert group.evidence == (a.evidence[1],)
    assert group.differs == (((1,), a.evidence[0]), ((10,), f"GPU 10: {a.evidence[0]}"))


def test_different_causes_or_fixes_are_not_grouped() -> None:
    starving = Verdict(
        gpu=2, state="busy_but_starving", cause="cpu_contention", fixes=("renice -n 19 -p 900",)
    )
    groups = group_verdicts([starving, _gpu_side(0), _gpu_side(1)])
    assert [g.gpus for g in groups] == [(2,), (0, 1)]


def test_a_stragglers_repeated_lines_are_said_once_with_where_they_are() -> None:
    rank0 = Verdict(
        gpu=0,
        state="busy_but_starving",
        cause="cpu_contention",
        evidence=("GPU 0: GPU_UTIL 100%", "trainer pid 11 waited for a CPU 65%", "9 runnable"),
        fixes=("renice -n 19 -p 900", "move the other work off this node"),
    )
    lead = "rank 0 (pid 11, the straggler)"
    rank1 = Verdict(
        gpu=1,
        state="busy_but_starving",
        cause="straggler",
        evidence=(
            "GPU 1: GPU_UTIL 98%",
            "rank 1 (pid 12) waited in its collectives 64% for rank 0 (pid 11, GPU 0)",
            "rank 0: trainer pid 11 waited for a CPU 65%",
            "rank 0: 9 runnable",
        ),
        fixes=tuple(f"{lead}: {f}" for f in rank0.fixes),
    )
    first, second = group_verdicts([rank0, rank1])
    assert first.evidence == rank0.evidence and first.fixes == rank0.fixes
    assert second.evidence == rank1.evidence[:2]
    assert second.fixes == ()
    assert second.repeats == (
        f"{lead}: its 2 evidence lines and 2 fixes are stated under GPU 0 above"
    )
