"""Every fix within reach: the verdicts of every demo and of 8 GPUs, as a terminal shows them.

The frames are the last of each built-in demo and of 8 fake GPUs, recorded for real by
``scripts/record_demo_frames.py`` (``tests/demo_frames.jsonl``). Each is drawn at 80x24 and
120x40 into a terminal model (``tests/pilotutil.Terminal``: every update the app writes,
applied to a grid of cells): the first fix is on screen without a key, and after ``v`` the
arrows, PgDn and the mouse wheel reach every evidence line and fix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from textual import events

from gputop.app import GputopApp
from gputop.model.frame import Frame, Verdict
from gputop.widgets.verdict_panel import VerdictPanel
from tests.frames_fixture import PushFeed
from tests.pilotutil import Terminal

FRAMES = Path(__file__).resolve().parent.parent / "demo_frames.jsonl"
SIZES = [(80, 24), (120, 40)]


def _scenarios() -> dict[str, Frame]:
    out = {}
    for line in FRAMES.read_text().splitlines():
        row = json.loads(line)
        out[row["scenario"]] = Frame.from_dict(row["frame"])
    return out


SCENARIOS = _scenarios()
# GPU numbers and the leads a grouped or repeated line loses ("GPU 3:", "rank 0:").
_NUMBERING = re.compile(r"^(\d+(-\d+)?(,\d+(-\d+)?)*:?|GPU|rank)$")


def _words(text: str) -> set[str]:
    return {w.strip(",;:()") for w in text.split()} - {""}


def _needed(verdicts: tuple[Verdict, ...]) -> tuple[set[str], list[str]]:
    """Every word of every evidence line and fix of the non-calm verdicts (GPU numbering
    aside), and the first fix of the most urgent one."""
    urgent = [v for v in verdicts if v.state not in ("ok", "idle")]
    words: set[str] = set()
    for v in urgent:
        for line in (*v.evidence, *v.fixes):
            words |= {w for w in _words(line) if not _NUMBERING.match(w)}
    first = next((v.fixes for v in urgent if v.fixes), ())
    return words, list(first[:1])


def test_every_demo_and_eight_gpus_are_in_the_recorded_frames() -> None:
    from gputop.demo import SCENARIOS as DEMOS

    assert set(SCENARIOS) == {*DEMOS, "8-gpus"}
    assert len(SCENARIOS["8-gpus"].verdicts) == 8


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_first_fix_shows_without_a_key_and_scrolling_reaches_every_line(
    name: str, size: tuple[int, int]
) -> None:
    frame = SCENARIOS[name]
    words, first_fix = _needed(frame.verdicts)
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=size) as pilot:
        terminal = Terminal(app)
        feed.push(frame)
        await pilot.pause()
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        top, bottom = panel.region.y, panel.region.bottom
        screen = " ".join(terminal.lines()[top:bottom])
        for fix in first_fix:
            # Every word of the first fix on the terminal, in the panel's rows.
            missing = _words(fix) - _words(screen)
            assert not missing, f"{name}: first fix not on screen: {missing}\n{screen}"
        await pilot.press("v")
        await pilot.pause()
        seen = _words(" ".join(terminal.lines()[panel.region.y : panel.region.bottom]))
        for press in ["down", "pagedown", "pagedown", "pagedown", "pagedown", "pagedown"]:
            if panel.fits or "▾" not in panel.shown_text[-1]:
                break  # the last line is on screen
            await pilot.press(press)
            await pilot.pause()
            seen |= _words(" ".join(terminal.lines()[panel.region.y : panel.region.bottom]))
        assert terminal.lines() == terminal.fresh(), "a scrolled line was not repainted"
        missing = words - seen
        assert not missing, f"{name} at {size}: never on screen: {sorted(missing)[:20]}"


async def test_the_mouse_wheel_scrolls_the_expanded_verdict_to_its_last_line() -> None:
    frame = SCENARIOS["cpu-contention"]
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        terminal = Terminal(app)
        feed.push(frame)
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        last = panel.text.splitlines()[-1].strip()
        assert not panel.fits, "the whole verdict must not fit 80x24 for this test"
        for _ in range(30):
            if "▾" not in panel.shown_text[-1]:
                break
            # The wheel as Textual's driver delivers it (Pilot has no scroll helper).
            await pilot._post_mouse_events([events.MouseScrollDown], VerdictPanel, (10, 2))
        lines = terminal.lines()[panel.region.y : panel.region.bottom]
        assert any(last in line for line in lines), "\n".join(lines)
        # Esc folds it back, and the arrows move the table again.
        await pilot.press("escape")
        await pilot.pause()
        assert not panel.expanded
        assert app.focused is app.table
