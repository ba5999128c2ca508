"""What the TUI leaves unimported until it is needed (RSS): plotext until the first drill-down,
prometheus_client until a dcgm-exporter page is parsed. Run in a subprocess: the test
session has imported both already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from gputop.app import GputopApp
    from gputop.sources.dcgm import parse_metrics
    from tests.frames_fixture import PushFeed, make_frames

    def loaded():
        return {m: m in sys.modules for m in ("plotext", "prometheus_client")}

    out = {}

    async def main():
        feed = PushFeed()
        app = GputopApp(feed)
        async with app.run_test(size=(120, 40)) as pilot:
            for frame in make_frames(3):
                feed.push(frame)
                await pilot.pause()
            out["running"] = loaded()
            await pilot.press("enter")
            await pilot.pause()
            out["drill_down"] = type(app.screen).__name__
            out["after_drill_down"] = loaded()
        parse_metrics('DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1"} 0.5\\n')
        out["after_parse"] = loaded()

    asyncio.run(main())
    print(json.dumps(out))
    """
)


def test_charts_and_the_exporter_parser_load_only_when_first_needed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "running": {"plotext": False, "prometheus_client": False},
        "drill_down": "ProcessScreen",
        "after_drill_down": {"plotext": True, "prometheus_client": False},
        "after_parse": {"plotext": True, "prometheus_client": True},
    }
