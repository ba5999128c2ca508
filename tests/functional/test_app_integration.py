"""The TUI against the snapshot and diagnosis modules."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gputop.app import GputopApp
from gputop.config import Config
from gputop.feeds import ReplayFeed
from gputop.messages import SnapshotFailed, SnapshotSaved
from gputop.widgets.verdict_panel import VerdictPanel
from tests.frames_fixture import make_frames
from tests.pilotutil import Posted


async def test_s_writes_a_private_bundle_with_the_screenshot_beside_it(
    tmp_path: Path, posted: Posted
) -> None:
    from gputop.snapshot import load_bundle

    app = GputopApp(ReplayFeed(make_frames(10)), config=Config(snapshot_dir=str(tmp_path)))
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert posted.of(SnapshotFailed) == []
    [saved] = posted.of(SnapshotSaved)
    path = saved.path
    assert posted.notes() == [f"snapshot saved: {path}"]
    assert Path(path).parent == tmp_path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    bundle = load_bundle(path)
    assert [f.seq for f in bundle.frames] == list(range(1, 11))
    assert bundle.screenshot is not None
    svg = (tmp_path / bundle.screenshot).read_text()
    assert svg.startswith("<svg") and "BUSY" in svg


async def test_replay_of_a_bundle_shows_its_last_frame_and_scrubs(tmp_path: Path) -> None:
    from gputop.feeds import replay_feed
    from gputop.snapshot import write_bundle

    path = write_bundle(make_frames(12), {}, str(tmp_path), None, True)
    app = GputopApp(replay_feed(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.query_one(VerdictPanel).state == "busy_but_starving"
        assert app.cursor == 11
        await pilot.press("left")
        assert app.cursor == 10
