"""A replayed bundle gives the lost GPU-hours of the live run that wrote it.

`gputop snapshot` of the starving demo (a real host workload: trainer, DataLoader workers,
CPU hogs) writes each frame with the GPU time its live ledger had added up by then. Opened
with `--replay`'s feed, the bundle's lost time is counted again over its own window from
the verdicts alone (``lost_pct`` and the interval of each frame), and must come out as the
live run's, frame by frame, and on the TUI's verdict panel.
"""

from __future__ import annotations

import json
from pathlib import Path

from gputop.app import GputopApp
from gputop.feeds import replay_feed
from gputop.widgets.verdict_panel import VerdictPanel, hours_text
from tests.harness import run_gputop


async def test_a_replayed_bundle_gives_the_lost_gpu_hours_of_the_live_run_that_wrote_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run.json"
    r = run_gputop(
        *("snapshot", "--demo", "cpu-contention", "--duration", "8", "--interval", "0.5"),
        *("--no-bpf", "-o", str(out)),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    bundle = json.loads(out.read_text())
    written = bundle["frames"]
    live = [f["gpus"][0]["lost_gpu_s"] for f in written]
    # The live run lost time to its cause, and said so as it went.
    assert live[-1].get("cpu_contention", 0.0) > 0.0, live[-1]
    assert written[-1]["verdicts"][0]["lost_pct"] > 0.0
    # The replay counts it itself: the same bundle without the recorded totals.
    for f in written:
        del f["gpus"][0]["lost_gpu_s"], f["gpus"][0]["lost_since"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(bundle))
    feed = replay_feed(str(bare))
    assert [f.gpus[0].lost_gpu_s for f in feed.frames] == live
    print(f"lost GPU-seconds, live {live[-1]} and replayed {feed.frames[-1].gpus[0].lost_gpu_s}")
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = app.query_one(VerdictPanel).text
    hours = hours_text(sum(live[-1].values()) / 3600.0)
    assert f"• {hours} GPU-hours lost since " in text, text
