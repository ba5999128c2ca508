"""What the screens and doctor say agrees with what runs: the drill-down never asks for the
eBPF probe while it is live, and doctor never calls throttling measured beside a probe that
cannot run (as a user, for real: `setpriv` drops root)."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Static

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Sources
from gputop.screens.process import ProcessScreen
from tests.doctorutil import row
from tests.frames_fixture import make_frames, unmeasured
from tests.harness import as_nobody, gputop_env, run_gputop

# A filler process of the fixture: no job of anyone's, so its preemptors are not recorded.
STRESS_PID = 5000


async def _side_text(frames):  # type: ignore[no-untyped-def]
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.table.select_key(f"{STRESS_PID}:3000")
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        parts = [screen.query_one(f"#{name}", Static).render() for name in ("waits", "hist")]
        return "\n".join(str(p) for p in parts)


async def test_the_drilldown_does_not_ask_for_the_probe_while_it_is_live() -> None:
    live = await _side_text(make_frames(5))
    assert "needs the eBPF probe" not in live, live
    assert "preempted by: recorded for trainers and DataLoader workers only" in live
    # Under /proc alone it does need the probe, and says so.
    procfs = [replace(f, sources=Sources("demo", "procfs")) for f in unmeasured(make_frames(5))]
    assert "preempted by: needs the eBPF probe" in await _side_text(procfs)


def test_doctor_as_a_user_calls_throttling_inferred_beside_a_probe_that_cannot_run() -> None:
    prefix = as_nobody()
    env = gputop_env(HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent", COLUMNS="200")
    r = run_gputop("doctor", prefix=prefix, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    probe = row(r.stdout, "eBPF probe")
    assert " NO " in probe, probe
    throttling = row(r.stdout, "CPU-limit throttling")
    assert "measured" not in throttling and "inferred" in throttling, r.stdout
