"""A cheap text sparkline: one block character per sample, no widget machinery.

Stock Sparkline widgets re-measure and re-render through Rich on every update;
gputop draws its series as plain strings inside line-based widgets instead.
"""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
MISSING = "·"


def sparkline(values: Sequence[float | None], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block characters, right-aligned (newest at the right).

    ``None`` (cannot report) is drawn as a dot, never as a zero bar; values are
    clamped to 0..``top``; the line is left-padded with spaces when the history
    is shorter than ``width``.
    """
    if width <= 0:
        return ""
    tail = values[-width:]
    scale = (len(BLOCKS) - 1) / top if top > 0 else 0.0
    out = []
    for v in tail:
        if v is None:
            out.append(MISSING)
        else:
            level = round(min(max(v, 0.0), top) * scale)
            out.append(BLOCKS[level])
    return " " * (width - len(tail)) + "".join(out)
