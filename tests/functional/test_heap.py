"""The heap settled once start-up is done: its objects frozen out of the collector, start-up's
garbage collected first, and garbage made afterwards still collected. Each case runs in a
subprocess: a freeze in the test session would keep the session's own garbage alive."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(body: str) -> dict[str, object]:
    code = (
        textwrap.dedent(
            """
        import gc, json, sys, weakref
        from gputop.heap import HeapSettler, YOUNG_THRESHOLD

        class Node:
            def __init__(self):
                self.me = self

        def cycle():
            node = Node()
            return weakref.ref(node)

        out = {}
        """
        )
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_heap_is_frozen_after_the_third_frame_and_not_before() -> None:
    out = _run(
        """
        settler = HeapSettler()
        out["returned"] = [settler.frame_done() for _ in range(5)]
        out["frozen"] = gc.get_freeze_count()
        out["young"] = gc.get_threshold()[0]
        """
    )
    assert out["returned"] == [False, False, True, False, False]
    assert isinstance(out["frozen"], int) and out["frozen"] > 1000
    assert out["young"] == 5000


def test_start_up_garbage_is_collected_not_frozen() -> None:
    out = _run(
        """
        gc.disable()
        before = cycle()
        out["alive_before"] = before() is not None
        settler = HeapSettler(after_frames=1)
        settler.frame_done()
        out["alive_after"] = before() is not None
        """
    )
    assert out == {"alive_before": True, "alive_after": False}


def test_garbage_made_after_the_freeze_is_still_collected() -> None:
    out = _run(
        """
        HeapSettler(after_frames=1).frame_done()
        kept = Node()
        later = cycle()
        out["alive"] = later() is not None
        gc.collect()
        out["collected"] = later() is None
        out["kept"] = kept.me is kept
        """
    )
    assert out == {"alive": True, "collected": True, "kept": True}


def test_a_settler_that_is_off_never_freezes() -> None:
    out = _run(
        """
        settler = HeapSettler(enabled=False, after_frames=1)
        out["returned"] = [settler.frame_done() for _ in range(3)]
        out["frozen"] = gc.get_freeze_count()
        out["young"] = gc.get_threshold()[0]
        """
    )
    assert out == {"returned": [False, False, False], "frozen": 0, "young": 700}


def test_the_live_tui_settles_its_heap_once_its_first_frames_are_drawn() -> None:
    out = _run(
        """
        import asyncio
        from gputop.app import GputopApp
        from tests.frames_fixture import PushFeed, make_frames

        async def main():
            frames = make_frames(4)
            for settle in (False, True):
                feed = PushFeed()
                app = GputopApp(feed, settle_heap=settle)
                async with app.run_test(size=(120, 40)) as pilot:
                    frozen = []
                    for frame in frames:
                        feed.push(frame)
                        await pilot.pause()
                        frozen.append(gc.get_freeze_count() > 0)
                out[str(settle)] = frozen

        asyncio.run(main())
        """
    )
    assert out == {"False": [False] * 4, "True": [False, False, True, True]}
