"""Fixture frames -> snapshot bundle -> replay: the replay renders as the frames did, at both
sizes."""

from __future__ import annotations

from pathlib import Path

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed, replay_feed
from gputop.snapshot import write_bundle
from tests.frames_fixture import make_frames
from tests.pilotutil import screen_of


async def test_fixture_bundle_replay_matches_the_direct_render_at_both_sizes(
    tmp_path: Path,
) -> None:
    frames = make_frames()
    path = write_bundle(frames, {}, str(tmp_path), None, redact=True)
    for size in ((80, 24), (120, 40)):
        direct = await screen_of(GputopApp(ReplayFeed(frames)), size)
        replayed = await screen_of(GputopApp(replay_feed(path)), size)
        assert replayed == direct
