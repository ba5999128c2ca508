"""A cheap text sparkline: one block character per sample, no widget machinery.

Stock Sparkline widgets re-measure and re-render through Rich on every update;
gputop draws its series as plain strings inside line-based widgets instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
MISSING = "·"


def sparkline(values: Sequence[float | None], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block characters, right-aligned (newest at the right).

    ``None`` (cannot report) and NaN or infinity (a broken reading) are drawn as a
    dot, a gap in the line, never as a zero bar and never an error; values are
    clamped to 0..``top``; the line is left-padded with spaces when the history
    is shorter than ``width``.
    """
    if width <= 0:
        return ""
    tail = values[-width:]
    scale = (len(BLOCKS) - 1) / top if top > 0 else 0.0
    out = []
    for v in tail:
        if v is None or not math.isfinite(v):
            out.append(MISSING)
        else:
            level = round(min(max(v, 0.0), top) * scale)
            out.append(BLOCKS[level])
    return " " * (width - len(tail)) + "".join(out)
