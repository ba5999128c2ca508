"""What a cause module hands the classifier: a state with its evidence and fixes.

Each cause family (``cause_cpu``, ``cause_input``, ``cause_gpu``) builds
``Judgement``s; the classifier (``diagnosis.classify``) picks the first rule that
holds and the ``Diagnoser`` confirms it over ticks.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import VerdictState


@dataclass(frozen=True, slots=True)
class Judgement:
    """One GPU's state over the window, the evidence that shows it and the fixes for it."""

    state: VerdictState
    evidence: tuple[str, ...]
    fixes: tuple[str, ...]
