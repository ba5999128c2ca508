"""record -> snapshot bundle -> replay on the starving demo (CPU hogs): the replay shows what
the recorded frames showed."""

from __future__ import annotations

import json
from pathlib import Path

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed, replay_feed
from gputop.model.frame import Frame
from gputop.snapshot import collect_meta, write_bundle
from tests.harness import run_gputop
from tests.pilotutil import screen_of


async def test_recorded_demo_replays_from_a_bundle_exactly_as_recorded(tmp_path: Path) -> None:
    jsonl = tmp_path / "frames.jsonl"
    r = run_gputop(
        *("record", "--demo", "cpu-contention"),
        *("--interval", "0.5", "--duration", "5", "--no-bpf", "-o", str(jsonl)),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    frames = [Frame.from_dict(json.loads(line)) for line in jsonl.read_text().splitlines()]
    assert len(frames) >= 8
    assert frames[-1].verdicts and frames[-1].verdicts[0].state == "busy_but_starving"

    direct = await screen_of(GputopApp(ReplayFeed(frames)), (120, 40))
    path = write_bundle(frames, collect_meta([]), str(tmp_path), None, redact=False)
    replayed = await screen_of(GputopApp(replay_feed(path)), (120, 40))
    assert direct[0] == replayed[0] == "busy_but_starving"
    assert replayed[1] == direct[1]
    assert "BUSY BUT STARVING" in replayed[1].replace("&#160;", " ")
