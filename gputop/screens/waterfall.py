"""The drill-down's cost waterfall: a trainer's wall time over the verdict's window, part by part.

Each row is one part of ``Verdict.lost_split`` (its GPU wait, each part the cause took,
the rest), its bar starting where the one above ended, so the bars walk across the
whole wall time once; the lost parts are marked with the cause that took them, and an
inferred share with ``*``. Under it: what the cause took in all and the bound on the
speed-up, then the GPU's lost time since counting began by cause, with money at a price.
"""

from __future__ import annotations

from rich.text import Text

from gputop.model.frame import Verdict
from gputop.model.view import GpuLoss
from gputop.widgets.verdict_panel import CAUSE_COSTS, CAUSE_TITLES, loss_line, speedup_text

BAR_W = 24
LABEL_W = 18
# Short names for the rows (the parts' own labels are for JSON readers).
NAMES = {
    "gpu": "GPU wait",
    "cpu_wait": "CPU wait",
    "after_gpu": "CPU wait after GPU",
    "batches": "waiting for batches",
    "work": "its own work",
    "h2d": "copying to the GPU",
    "collective": "waiting for ranks",
    "clocks": "slowed clocks",
    "rest": "the rest",
}
STYLES = {"gpu": "cyan", "rest": "grey50"}
LOST_STYLE = "bold red"


def _name(key: str, label: str) -> str:
    name = NAMES.get(key, label)
    return name if len(name) <= LABEL_W else name[: LABEL_W - 1] + "…"


def waterfall(v: Verdict, loss: GpuLoss | None, now: float) -> Text:
    """The waterfall of ``v``'s split, what its cause took, and the GPU's lost time."""
    cause = CAUSE_TITLES.get(v.cause, str(v.cause)) if v.cause is not None else "no cause"
    t = Text(f"where its time went, GPU {v.gpu} (cause: {cause}):\n", style="bold")
    start = 0.0
    inferred = False
    for part in v.lost_split:
        first = round(BAR_W * start / 100.0)
        start += part.pct
        cells = max(0, round(BAR_W * min(100.0, start) / 100.0) - first)
        if cells == 0 and part.pct >= 0.5:
            cells = 1
        lost = part.cause is not None
        style = LOST_STYLE if lost else STYLES.get(part.key, "")
        mark = "*" if not part.measured else " "
        inferred = inferred or not part.measured
        t.append(f"{_name(part.key, part.label):<{LABEL_W}} ")
        t.append(" " * first + "█" * cells, style=style)
        t.append(" " * max(0, BAR_W - first - cells))
        t.append(f" {part.pct:>3.0f}%{mark}")
        if lost:
            t.append(" lost", style=LOST_STYLE)
        t.append("\n")
    if v.lost_pct is not None and v.cause is not None:
        # The cost sentence's subject without its verb: "Its CPU limit", "Slowed clocks".
        subject = CAUSE_COSTS[v.cause].rsplit(" ", 1)[0]
        t.append(f"{subject} took {v.lost_pct:.0f}% of its time", style=LOST_STYLE)
        if v.speedup_max is not None:
            t.append(f": up to {speedup_text(v.speedup_max)} faster without it")
        t.append("\n")
    if inferred:
        t.append("* inferred (docs/diagnosis.md, what the cause costs)\n", style="italic")
    if loss is not None:
        line = loss_line(loss, now, shares=True)
        if line is not None:
            t.append(f"GPU {v.gpu}: {line}\n")
    t.rstrip()
    return t
