"""GPUs with the same verdict stated once: ``GPU 0-7: ...``, with what differs per GPU after.

Eight GPUs of one node often get the same verdict (one job on all of them, or one
cause for all): the verdict panel says it once for all of them instead of eight
times. GPUs group when their state, cause and fixes are the same once each one's own
``GPU n`` is read as "this GPU"; their lines the same in every one of them are stated
once with the group's label (``GPU 0-7``), and the lines that differ follow, each
under its GPU. A later verdict that repeats lines stated above (a straggler's verdict
carries its straggler's evidence and fixes, each led by ``rank 0: ``) says so in one
line instead of repeating them. Pure text: the panel wraps and draws the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gputop.model.fixes import cpu_list
from gputop.model.frame import Cause, Verdict, VerdictState

# Where a line names its own GPU: replaced by this mark while comparing GPUs.
_OWN = "\0GPU\0"


def gpu_label(gpus: Iterable[int]) -> str:
    """``GPU 3``, ``GPU 0-7``, ``GPU 0,2,5-7``: GPU indices with runs as ranges."""
    return "GPU " + cpu_list(gpus)  # the same list form as taskset's


def _own(gpu: int) -> re.Pattern[str]:
    # "GPU 1" but not "GPU 10": the GPU's own index, not a longer number.
    return re.compile(rf"\bGPU {gpu}(?!\d)")


def _generic(line: str, gpu: int) -> str:
    return _own(gpu).sub(_OWN, line)


def _named(line: str, label: str) -> str:
    return line.replace(_OWN, label)


def _labelled(line: str, gpus: Iterable[int]) -> str:
    """A line some GPUs of a group have: led by their label unless it names them itself."""
    label = gpu_label(gpus)
    if _OWN in line:
        return _named(line, label)
    return f"{label}: {line}"


@dataclass(frozen=True, slots=True)
class VerdictGroup:
    """One verdict as the panel states it, for every GPU that has it.

    ``costs`` and ``evidence``: the lines every GPU of the group shares (their own GPU
    written as the group's label); ``differs``: the other lines, each once with the GPUs
    that have it (and their label in it), in order; ``repeats``: one line standing for
    the lines left out because a group above states them already (None: none left out).
    """

    gpus: tuple[int, ...]
    state: VerdictState
    cause: Cause | None
    costs: tuple[str, ...]
    evidence: tuple[str, ...]
    differs: tuple[tuple[tuple[int, ...], str], ...]
    fixes: tuple[str, ...]
    repeats: str | None = None
    efficiency: float | None = None

    @property
    def label(self) -> str:
        """``GPU 0-7``."""
        return gpu_label(self.gpus)


def group_verdicts(
    verdicts: Sequence[Verdict], costs: dict[int, tuple[str, ...]] | None = None
) -> list[VerdictGroup]:
    """The verdicts (most urgent first) grouped by GPUs with the same verdict, in order of
    each group's first GPU; ``costs``: each GPU's cost lines, shown before its evidence."""
    costs = costs or {}
    members: dict[tuple[object, ...], list[tuple[Verdict, tuple[str, ...]]]] = {}
    for v in verdicts:
        key = (v.state, v.cause, tuple(_generic(f, v.gpu) for f in v.fixes))
        members.setdefault(key, []).append((v, costs.get(v.gpu, ())))
    out: list[VerdictGroup] = []
    shown: list[tuple[str, str]] = []
    for same in members.values():
        group = _group(same)
        group = _without_repeats(group, shown)
        shown.extend((line, group.label) for line in (*group.evidence, *group.fixes))
        out.append(group)
    return out


def _group(members: list[tuple[Verdict, tuple[str, ...]]]) -> VerdictGroup:
    first = members[0][0]
    gpus = tuple(v.gpu for v, _ in members)
    label = gpu_label(gpus)
    generic = [
        ([_generic(c, v.gpu) for c in cost], [_generic(e, v.gpu) for e in v.evidence])
        for v, cost in members
    ]
    # A line every GPU of the group has, in the first GPU's order.
    common_costs = [c for c in generic[0][0] if all(c in g[0] for g in generic)]
    common_ev = [e for e in generic[0][1] if all(e in g[1] for g in generic)]
    # The rest: each line once with the GPUs that have it ("GPU 0-4,6-7: ..."), in order.
    rest: dict[str, list[int]] = {}
    if len(members) > 1:
        for (v, _), (cost, ev) in zip(members, generic, strict=True):
            for line in [c for c in cost if c not in common_costs] + [
                e for e in ev if e not in common_ev
            ]:
                rest.setdefault(line, []).append(v.gpu)
    differs = tuple((tuple(g), _labelled(line, g)) for line, g in rest.items())
    same_eff = all(v.efficiency == first.efficiency for v, _ in members)
    return VerdictGroup(
        gpus=gpus,
        state=first.state,
        cause=first.cause,
        costs=tuple(_named(c, label) for c in common_costs),
        evidence=tuple(_named(e, label) for e in common_ev),
        differs=differs,
        fixes=tuple(_named(_generic(f, first.gpu), label) for f in first.fixes),
        efficiency=first.efficiency if same_eff else None,
    )


def _without_repeats(group: VerdictGroup, shown: list[tuple[str, str]]) -> VerdictGroup:
    """The group without its lines that repeat a line stated above after a lead of their own
    (``rank 0: ...``, ``rank 0 (pid 3821, the straggler): ...``), with one line saying so."""
    if not shown:
        return group

    def repeat(line: str) -> tuple[str, str] | None:
        for said, where in shown:
            if line != said and line.endswith(": " + said):
                return line[: -len(said) - 2], where
        return None

    evidence, fixes = [], []
    leads: dict[str, str] = {}
    n_ev = n_fix = 0
    for line in group.evidence:
        hit = repeat(line)
        if hit is None:
            evidence.append(line)
        else:
            n_ev += 1
            leads.setdefault(hit[0], hit[1])
    for line in group.fixes:
        hit = repeat(line)
        if hit is None:
            fixes.append(line)
        else:
            n_fix += 1
            leads.setdefault(hit[0], hit[1])
    if not leads:
        return group
    # The fullest lead names it best: "rank 0 (pid 3821, the straggler)" over "rank 0".
    lead = max(leads, key=len)
    parts = []
    if n_ev:
        parts.append(f"{n_ev} evidence line{'s' if n_ev != 1 else ''}")
    if n_fix:
        parts.append(f"{n_fix} fix{'es' if n_fix != 1 else ''}")
    note = f"{lead}: its {' and '.join(parts)} are stated under {leads[lead]} above"
    return replace(group, evidence=tuple(evidence), fixes=tuple(fixes), repeats=note)
