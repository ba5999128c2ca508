"""Starting as anyone may: a config file that cannot be read is a warning, not a stop; a
user's TUI says on its status line why the eBPF probe is off and how to turn it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop.app import GputopApp
from gputop.config import Config
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.widgets.status_line import StatusLine
from tests.frames_fixture import PushFeed, make_frames
from tests.harness import as_nobody, gputop_env, run_gputop
from tests.pilotutil import Posted


@pytest.mark.parametrize("kind", ["a path through a file", "a directory"])
def test_a_config_that_cannot_be_read_is_a_warning_and_the_defaults_hold(
    kind: str, tmp_path: Path
) -> None:
    # As root every mode bit is bypassed: a path through a file (ENOTDIR) and a config.toml
    # that is a directory (EISDIR) fail to read as a home the user may not read (EACCES).
    if kind == "a directory":
        (tmp_path / "gputop" / "config.toml").mkdir(parents=True)
        xdg = str(tmp_path)
    else:
        (tmp_path / "file").write_text("")
        xdg = str(tmp_path / "file")
    out = tmp_path / "frames.jsonl"
    r = run_gputop(
        "record", "--no-bpf", "--duration", "0.3", "-o", str(out),
        env=gputop_env(XDG_CONFIG_HOME=xdg), timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("gputop: warning: cannot read ") and "config.toml" in line, line
    assert line.endswith("; using the default settings")
    assert json.loads(out.read_text().splitlines()[-1])["interval"] > 0


async def test_the_tui_says_the_config_warning_too(posted: Posted) -> None:
    warning = "cannot read /root/.config/gputop/config.toml: Permission denied; using ..."
    app = GputopApp(ReplayFeed(make_frames(3)), config=Config(warning=warning))
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        await pilot.pause()
        assert warning in posted.notes()


def test_a_users_status_line_says_why_the_probe_is_off_and_how_to_turn_it_on(
    tmp_path: Path,
) -> None:
    prefix = as_nobody()
    # The frames a user's gputop samples, for real: its probe refuses to load.
    r = run_gputop(
        "record", "--duration", "1", "-o", "-", prefix=prefix, timeout=60,
        env=gputop_env(HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    frames = [Frame.from_dict(json.loads(x)) for x in r.stdout.splitlines()]
    assert frames[-1].sources.sched == "procfs"

    async def status() -> str:
        feed = PushFeed()  # live, as the TUI runs (a replay leads with its place)
        app = GputopApp(feed)
        async with app.run_test(size=(80, 24)) as pilot:
            for f in frames:
                feed.push(f)
            await pilot.pause()
            return app.query_one(StatusLine).text

    import asyncio

    line = asyncio.run(status())
    shown = line[:78]  # what an 80-column terminal shows of it
    assert "sched:procfs (eBPF off: needs root; run gputop with sudo)" in shown, line
