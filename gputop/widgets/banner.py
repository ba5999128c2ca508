"""The verdict banner at the top of the main screen."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from gputop.model.frame import Verdict, VerdictState

# Worst first: the banner shows the most urgent verdict any GPU has.
SEVERITY: tuple[VerdictState, ...] = (
    "busy_but_starving",
    "input_bound",
    "throttled",
    "low_sm_efficiency",
    "unknown",
    "idle",
    "ok",
)
TITLES: dict[VerdictState, str] = {
    "busy_but_starving": "BUSY BUT STARVING",
    "input_bound": "INPUT BOUND",
    "throttled": "THROTTLED",
    "low_sm_efficiency": "LOW SM EFFICIENCY",
    "unknown": "UNKNOWN",
    "idle": "IDLE",
    "ok": "OK",
}


def worst(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts that share the most urgent state, in GPU order."""
    if not verdicts:
        return []
    rank = {s: i for i, s in enumerate(SEVERITY)}
    top = min(rank.get(v.state, len(SEVERITY)) for v in verdicts)
    return [v for v in verdicts if rank.get(v.state, len(SEVERITY)) == top]


class VerdictBanner(Static):
    """Calm one line when healthy; a coloured block with evidence and the top fix otherwise.

    The state is a CSS class (``-busy_but_starving``, ``-ok``, ...) so colours come
    from theme variables and NO_COLOR still leaves the state's name readable.
    """

    DEFAULT_CSS = """
    VerdictBanner {
        height: auto;
        max-height: 3;
        padding: 0 1;
        background: $boost;
        color: $text-muted;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    VerdictBanner.-ok { color: $text-success; background: $success-muted; }
    VerdictBanner.-idle { color: $text-muted; background: $boost; }
    VerdictBanner.-unknown { color: $text-primary; background: $primary-muted; }
    VerdictBanner.-low_sm_efficiency { color: $text-warning; background: $warning-muted; }
    VerdictBanner.-throttled { color: $text-accent; background: $accent-muted; }
    VerdictBanner.-input_bound { color: $text; background: $warning; }
    VerdictBanner.-busy_but_starving { color: $text; background: $error; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("no verdict yet — waiting for the first frames", id=id)
        self._shown: tuple[str, tuple[Verdict, ...]] | None = None
        self._state = "none"

    @property
    def state(self) -> str:
        """The state the banner shows now ("none" before any verdict)."""
        return self._state

    def show(self, verdicts: Sequence[Verdict], has_gpus: bool = True) -> None:
        """Render the most urgent verdict; a no-op when nothing changed."""
        top = worst(verdicts)
        state = top[0].state if top else ("none" if has_gpus else "no_gpu")
        key = (state, tuple(top))
        if key == self._shown:
            return
        self._shown = key
        self.remove_class(f"-{self._state}")
        self._state = state
        self.add_class(f"-{state}")
        self.update(self._text(top, state))

    @staticmethod
    def _text(top: list[Verdict], state: str) -> Text:
        if state == "no_gpu":
            return Text(
                "no GPU to judge — host signals only (the status line says why)", no_wrap=True
            )
        if not top:
            return Text("no verdict yet — diagnosis needs a few frames", no_wrap=True)
        v = top[0]
        gpus = ",".join(str(x.gpu) for x in top)
        title = TITLES.get(v.state, v.state.upper())
        text = Text(no_wrap=True, overflow="ellipsis")
        mark = "✓" if v.state == "ok" else "▲"
        text.append(f"{mark} {title}", style="bold")
        text.append(f"  GPU {gpus}")
        if v.efficiency is not None:
            text.append(f"  efficiency {v.efficiency:.2f}")
        if v.state == "ok":
            if v.evidence:
                text.append(f" — {v.evidence[0]}")
            return text
        if v.evidence:
            text.append("\n" + v.evidence[0])
        if v.fixes:
            text.append("\nfix: ", style="bold")
            text.append(v.fixes[0])
        return text
