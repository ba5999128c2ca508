"""Causes: what holds a GPU back, their one precedence, and what a cause module returns.

Each cause family (``cause_cpu``, ``cause_input``, ``cause_trainer``, ``cause_gpu``) builds
``Judgement``s; the classifier (``diagnosis.classify``) tries the families in
``CAUSE_PRECEDENCE`` order and the first that holds names the cause. The
``Diagnoser`` then confirms the state over ticks.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import Cause, VerdictState

CAUSE_PRECEDENCE: tuple[Cause, ...] = (
    "cpu_limit",
    "cpu_contention",
    "clocks",
    "input_storage",
    "input_remote",
    "input_compute",
    "transfer",
    "trainer_work",
    "straggler",
    "gpu_side",
)
"""When several causes hold, the first of these is the verdict's (docs/diagnosis.md).

The host's CPU comes first: a starved job cannot show what its pipeline or its GPU would do
with enough CPU, and a limit the job runs into comes before the processes beside it
(raising the limit is the fix that fits). Clocks come next (they slow everything on the
GPU), then the input pipeline (storage before the compute that waits for it, a remote
source's round trips before the compute too), the trainer's copies of its batches to the
GPU, then its other own work, another rank (a straggler is named only when nothing on this
rank explains the wait), and last the GPU's own kernels, which are what is left when the
host is clear.
"""


@dataclass(frozen=True, slots=True)
class Judgement:
    """One GPU's state over the window, its cause, the evidence and the fixes.

    ``cause`` is None for the states where nothing holds the GPU back.
    """

    state: VerdictState
    evidence: tuple[str, ...]
    fixes: tuple[str, ...]
    cause: Cause | None = None
