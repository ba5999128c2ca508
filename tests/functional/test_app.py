"""The TUI driven through Textual's Pilot on deterministic frames (no live /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace

import pytest
from textual.pilot import Pilot

from gputop.app import GputopApp
from gputop.config import parse_config
from gputop.feeds import ReplayFeed
from gputop.messages import KillRequested, ProcessSignalled, TableView, ViewChanged
from gputop.model.frame import Frame, ProcessSample
from gputop.screens.help import HelpScreen
from gputop.screens.kill import KillScreen
from gputop.screens.process import ProcessScreen
from gputop.screens.sort import SortScreen
from gputop.widgets.gpu_panel import GpuPanel
from gputop.widgets.process_table import ProcessTable
from gputop.widgets.status_line import StatusLine
from gputop.widgets.verdict_panel import VerdictPanel
from tests.frames_fixture import (
    OTHER_TRAINER_PID,
    STARVING_TRAINER_PID,
    WORKER_PIDS,
    PushFeed,
    make_frame,
    make_frames,
)
from tests.pilotutil import Posted, Terminal

STARVING_KEY = f"{STARVING_TRAINER_PID}:1000"


def replay_app(n: int = 60, **kw: object) -> GputopApp:
    return GputopApp(ReplayFeed(make_frames(n, **kw)))  # type: ignore[arg-type]


def panel_text(panel: GpuPanel) -> str:
    return "\n".join("".join(text for text, _ in line) for line in panel._lines)


def pids(table: ProcessTable) -> list[int]:
    return [int(k.split(":")[0]) for k in table.order]


def status_text(app: GputopApp) -> str:
    return app.query_one(StatusLine).text


async def open_starving_trainer(app: GputopApp, pilot: Pilot[int]) -> ProcessScreen:
    """Select the starving trainer and press Enter: its drill-down."""
    await pilot.pause()
    assert app.table.select_key(STARVING_KEY)
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, ProcessScreen)
    return app.screen


# ---- main screen ---------------------------------------------------------------


async def test_main_screen_shows_starving_banner_both_gpus_and_every_process() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        banner = app.query_one(VerdictPanel)
        assert banner.state == "busy_but_starving"
        assert "BUSY BUT STARVING" in str(banner.render())
        assert "fix:" in str(banner.render())
        panels = list(app.query(GpuPanel))
        assert [p.uuid for p in panels] == [g.uuid for g in make_frame(0).gpus]
        assert "GPU0 NVIDIA H100" in panel_text(panels[0])
        # GPU 1 cannot report SM activity: n/a, never a zero.
        sm_line = panel_text(panels[1]).splitlines()[2]
        assert sm_line.startswith("SM") and sm_line.rstrip().endswith("n/a")
        assert "eff n/a" in panel_text(panels[1])
        assert app.table.row_count == len(make_frame(0).processes)
        assert "gpu:demo" in status_text(app) and "sched:bpf" in status_text(app)


async def test_banner_is_calm_without_verdicts() -> None:
    app = replay_app(verdicts=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        banner = app.query_one(VerdictPanel)
        assert banner.state == "none"
        assert "no verdict yet" in str(banner.render())


async def test_no_gpu_panel_says_host_signals_only_and_why() -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panels = list(app.query(GpuPanel))
        assert len(panels) == 1 and panels[0].uuid is None
        text = panel_text(panels[0])
        assert "no GPU — host signals only" in text
        assert "NVML library not found" in text
        assert "gpu:none" in status_text(app)
        banner = app.query_one(VerdictPanel)
        assert banner.state == "no_gpu"
        assert "no GPU to judge" in str(banner.render())


async def test_tree_puts_dataloader_workers_under_their_trainer_and_t_flattens() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        order = pids(app.table)
        at = order.index(STARVING_TRAINER_PID)
        assert sorted(order[at + 1 : at + 5]) == sorted(WORKER_PIDS)
        assert order[order.index(OTHER_TRAINER_PID) + 1] == 4120
        await pilot.press("t")
        flat = pids(app.table)
        cpu = {p.pid: p.cpu_pct for p in make_frames(60)[-1].processes}
        assert [cpu[p] for p in flat] == sorted(cpu.values(), reverse=True)
        assert not app.table.tree_mode


async def test_sort_keys_step_columns_invert_and_pick_from_f6_menu() -> None:
    app = replay_app()
    last = make_frames(60)[-1]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("t")  # flat, so the whole table follows the sort
        await pilot.press("greater_than_sign")
        assert app.table.sort_key == "offcpu"
        off = {p.pid: p.offcpu_pct for p in last.processes}
        assert [off[p] for p in pids(app.table)] == sorted(off.values(), reverse=True)
        await pilot.press("I")
        assert [off[p] for p in pids(app.table)] == sorted(off.values())
        await pilot.press("less_than_sign", "less_than_sign")
        assert app.table.sort_key == "user"
        await pilot.press("f6")
        assert isinstance(app.screen, SortScreen)
        await pilot.press("home", "enter")
        assert app.table.sort_key == "pid"
        assert pids(app.table) == sorted(p.pid for p in last.processes)
        assert "sort PID" in status_text(app)


async def test_filter_narrows_rows_enter_keeps_it_and_escape_clears() -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"finetune", "enter")
        assert sorted(pids(app.table)) == [OTHER_TRAINER_PID, 4120]
        assert app.focused is app.table
        assert "filter" in status_text(app)
        await pilot.press("escape")
        assert app.table.row_count == len(last_processes())


def last_processes() -> tuple[ProcessSample, ...]:
    return make_frames(60)[-1].processes


async def test_selection_follows_its_process_and_rows_update_in_place() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        feed.push(make_frame(0))
        await pilot.pause()
        assert app.table.select_key(STARVING_KEY)
        before = pids(app.table).index(STARVING_TRAINER_PID)
        # Push the trainer to the top of the CPU sort: its row moves, the cursor follows.
        f1 = make_frame(1)
        hot = tuple(
            replace(p, cpu_pct=400.0) if p.pid == STARVING_TRAINER_PID else p for p in f1.processes
        )
        feed.push(replace(f1, processes=hot))
        await pilot.pause()
        assert pids(app.table).index(STARVING_TRAINER_PID) == 0 != before
        assert app.table.selected is not None
        assert app.table.selected.pid == STARVING_TRAINER_PID
        # A process that exits loses its row; a new one gets a row.
        newcomer = replace(hot[-1], pid=9999, start_time=9999, cmdline="new")
        gone = (*(p for p in hot if p.pid != 5000), newcomer)
        feed.push(replace(make_frame(2), processes=gone))
        await pilot.pause()
        assert 5000 not in pids(app.table) and 9999 in pids(app.table)
        assert app.table.selected is not None
        assert app.table.selected.pid == STARVING_TRAINER_PID


async def test_only_rows_whose_cells_changed_are_rendered_again() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        f0 = make_frame(0)
        feed.push(f0)
        await pilot.pause()
        before = app.table.cache.renders
        one_changed = tuple(replace(p, cpu_pct=12.3) if p.pid == 5000 else p for p in f0.processes)
        feed.push(replace(f0, seq=2, t=f0.t + 1, processes=one_changed))
        await pilot.pause()
        assert app.table.cache.renders - before == 1
        assert app.table.cells("5000:3000")["cpu"] == "12.3"


async def test_reused_pid_is_a_new_row() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        f0 = make_frame(0)
        feed.push(f0)
        await pilot.pause()
        reborn = tuple(replace(p, start_time=77) if p.pid == 5000 else p for p in f0.processes)
        feed.push(replace(make_frame(1), processes=reborn))
        await pilot.pause()
        assert "5000:77" in app.table.order and "5000:3000" not in app.table.order


async def test_frames_from_another_thread_are_coalesced_not_lost() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        import threading

        frames = make_frames(30)
        t = threading.Thread(target=lambda: [feed.push(f) for f in frames])
        t.start()
        t.join()
        await pilot.pause()
        assert len(app.history) == 30
        assert app.history.last is not None and app.history.last.seq == 30


async def test_pause_freezes_the_display_while_history_keeps_growing() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        feed.push(make_frame(0))
        await pilot.pause()
        await pilot.press("p")
        assert app.paused and "PAUSED" in status_text(app)
        shown = app.table.cells("5000:3000")
        f1 = make_frame(1)
        changed = tuple(replace(p, cpu_pct=12.3) if p.pid == 5000 else p for p in f1.processes)
        feed.push(replace(f1, processes=changed))
        await pilot.pause()
        assert len(app.history) == 2
        assert app.table.cells("5000:3000") == shown
        await pilot.press("p")
        assert not app.paused and "PAUSED" not in status_text(app)
        assert app.table.cells("5000:3000")["cpu"] == "12.3"


async def test_enter_opens_the_drilldown_and_escape_returns_with_selection_kept() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_starving_trainer(app, pilot)
        assert screen.key == (STARVING_TRAINER_PID, 1000)
        threads = screen.query_one("#threads")
        assert threads.row_count == 4  # type: ignore[attr-defined]
        hist = str(screen.query_one("#hist").render())
        assert "longest stall: 48.3 ms" in hist and "off-CPU stalls" in hist
        assert "GPU 0: 58.6 GiB" in str(screen.query_one("#gpu").render())
        assert "replay" in str(screen.query_one("#stack").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, ProcessScreen)
        assert app.table.selected is not None
        assert app.table.selected.pid == STARVING_TRAINER_PID


async def test_drilldown_follows_new_frames() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        feed.push(make_frame(0))
        await open_starving_trainer(app, pilot)
        feed.push(make_frame(1))
        await pilot.pause()
        assert len(app.screen.history) == 2
        # Table keys (filter, tree) do nothing on the drill-down.
        await pilot.press("t")
        assert app.table.tree_mode


async def test_the_drilldown_redraws_every_tick_over_its_whole_window() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        for i in range(5):
            feed.push(make_frame(i))
            await pilot.pause()
        terminal = Terminal(app)
        screen = await open_starving_trainer(app, pilot)
        shown = []
        for i in range(5, 9):
            feed.push(make_frame(i))
            await pilot.pause()
            await pilot.pause()
            assert screen.view.frame is app.history.last
            # The charts span every frame the process was in, not only the newest ones.
            assert len(app.history.proc_series(screen.key, "runq_pct")) == i + 1
            assert terminal.lines() == terminal.fresh(), f"frame {i}: a change was not repainted"
            shown.append(terminal.lines())
        assert shown[0] != shown[-1], "the drill-down moves with the frames"


async def test_help_lists_every_binding_and_closes() -> None:
    app = replay_app(5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        descriptions = [what for _, what in app.screen.keys]
        for b in GputopApp.BINDINGS:
            assert app.KEY_HELP[b.id] in descriptions  # type: ignore[union-attr]
        assert any(k == "Enter" for k, _ in app.screen.keys)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


async def test_left_right_scrub_the_replay_timeline() -> None:
    app = replay_app(10)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.cursor == 9 and "replay 10/10" in status_text(app)
        await pilot.press("left", "left")
        assert app.cursor == 7
        assert app.history.last is not None and app.history.last.seq == 8
        assert len(app.history) == 8
        await pilot.press("right")
        assert app.cursor == 8 and "replay 9/10" in status_text(app)


async def test_mouse_click_selects_a_row_and_a_header_click_sorts() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.click(ProcessTable, offset=(3, 3))
        assert app.table.cursor_row == 2
        await pilot.click(ProcessTable, offset=(3, 0))  # the PID header
        assert app.table.sort_key == "pid"
        await pilot.click(ProcessTable, offset=(3, 0))
        assert app.table.sort_key == "pid" and app.table.sort_reverse


async def test_arrows_move_the_filter_cursor_not_the_replay() -> None:
    app = replay_app(10)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", "b", "o", "left")
        assert app.cursor == 9


async def test_a_dead_sampler_thread_is_reported_once(posted: Posted) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        app.check_feed()
        await pilot.pause()
        assert posted.notes() == []
        feed.error = RuntimeError("probe exploded")
        app.check_feed()
        app.check_feed()
        await pilot.pause()
        notes = posted.notes()
        assert len(notes) == 1 and "probe exploded" in notes[0]


async def test_quit_key_exits() -> None:
    app = replay_app(3)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
    assert app.return_code == 0


async def test_survives_resize_down_to_80x24() -> None:
    app = replay_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        for size in ((120, 40), (80, 24), (60, 20), (120, 40)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
        grid = app.query_one("#gpus Grid")
        assert grid.styles.grid_size_columns == 2
        panel = app.query(GpuPanel).first()
        assert all(len(line) > 0 for line in panel._lines)


async def test_k_in_the_drilldown_asks_the_app_to_kill_that_process(posted: Posted) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40), message_hook=posted) as pilot:
        feed.push(make_frame(0))
        await open_starving_trainer(app, pilot)
        # The table's cursor moves away underneath; the drill-down still names its own process.
        app.table.action_jump(-1)
        await pilot.press("k")
        await pilot.pause()
        [asked] = posted.of(KillRequested)
        assert asked.process.pid == STARVING_TRAINER_PID
        assert isinstance(app.screen, KillScreen) and app.screen.process.pid == STARVING_TRAINER_PID
        await pilot.press("escape")
        await pilot.pause()
        assert posted.of(ProcessSignalled) == []


async def test_view_changes_are_posted_and_shown_on_the_status_line(posted: Posted) -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40), message_hook=posted) as pilot:
        await pilot.pause()
        assert "sort CPU%▼ tree" in status_text(app)
        await pilot.press("t", "I")
        await pilot.press("slash", *"bob")
        await pilot.pause()
        views = [m.view for m in posted.of(ViewChanged)]
        assert views[0] == TableView("cpu", True, False, "")
        assert views[1] == TableView("cpu", False, False, "")
        assert views[-1] == TableView("cpu", False, False, "bob")
        assert "sort CPU%▲ │" in status_text(app) and "filter “bob”" in status_text(app)


async def test_scrubbing_refills_the_history_an_open_drilldown_holds() -> None:
    app = replay_app(10)
    async with app.run_test(size=(120, 40)) as pilot:
        history = app.history
        screen = await open_starving_trainer(app, pilot)
        assert screen.history is history
        assert len(history) == 10
        app.action_scrub(-3)
        await pilot.pause()
        assert app.history is history and screen.history is history
        assert len(history) == 7 and history.last is not None and history.last.seq == 7


async def test_markup_in_command_lines_and_thread_names_is_shown_verbatim() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    evil = "python3 [red]evil[/red] [unclosed"
    async with app.run_test(size=(120, 40)) as pilot:
        f = make_frame(0)
        procs = tuple(
            replace(p, cmdline=evil, threads=tuple(replace(t, comm="[b]") for t in p.threads))
            if p.pid == STARVING_TRAINER_PID
            else p
            for p in f.processes
        )
        feed.push(replace(f, processes=procs))
        screen = await open_starving_trainer(app, pilot)
        assert evil in str(screen.query_one("#head").render())
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)
        assert evil in str(app.screen.query_one("#question").render())
        await pilot.press("escape")


# ---- kill --------------------------------------------------------------------


def _frame_with(child: subprocess.Popen[bytes]) -> Frame:
    with open(f"/proc/{child.pid}/stat", "rb") as fh:
        start = int(fh.read().rsplit(b")", 1)[1].split()[19])
    proc = ProcessSample(
        pid=child.pid,
        ppid=os.getpid(),
        comm="python3",
        cmdline="python3 -c sleep",
        role="other",
        trainer_pid=None,
        cpu_pct=1000.0,  # first row under the CPU sort
        offcpu_pct=None,
        runq_pct=None,
        preempt_per_s=0.0,
        preempt_total=0,
        vcsw_per_s=0.0,
        start_time=start,
        user="me",
    )
    f = make_frame(0)
    return replace(f, processes=(proc, *f.processes))


@pytest.mark.parametrize(("key", "expected"), [("t", -signal.SIGTERM), ("K", -signal.SIGKILL)])
async def test_kill_confirmed_signals_the_real_child(
    key: str, expected: int, posted: Posted, sleeper: subprocess.Popen[bytes]
) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        feed.push(_frame_with(sleeper))
        await pilot.pause()
        assert app.table.selected is not None and app.table.selected.pid == sleeper.pid
        await pilot.press("k")
        assert isinstance(app.screen, KillScreen)
        await pilot.press(key)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert sleeper.wait(timeout=10) == expected
        [done] = posted.of(ProcessSignalled)
        assert done.outcome.sent and done.outcome.pid == sleeper.pid
        assert f"to PID {sleeper.pid}" in posted.notes()[-1]


async def test_kill_cancelled_leaves_the_process_alone(sleeper: subprocess.Popen[bytes]) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        feed.push(_frame_with(sleeper))
        await pilot.pause()
        await pilot.press("k", "escape")
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
        assert sleeper.poll() is None


async def test_kill_refuses_a_reused_pid(posted: Posted, sleeper: subprocess.Popen[bytes]) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        f = _frame_with(sleeper)
        stale = replace(f.processes[0], start_time=f.processes[0].start_time - 1)
        feed.push(replace(f, processes=(stale, *f.processes[1:])))
        await pilot.pause()
        await pilot.press("k", "t")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert sleeper.poll() is None
        [done] = posted.of(ProcessSignalled)
        assert not done.outcome.sent and "different process" in done.outcome.message


async def test_readonly_refuses_to_kill(posted: Posted, sleeper: subprocess.Popen[bytes]) -> None:
    feed = PushFeed()
    app = GputopApp(feed, readonly=True)
    async with app.run_test(size=(80, 24), message_hook=posted) as pilot:
        feed.push(_frame_with(sleeper))
        await pilot.pause()
        await pilot.press("k")
        await pilot.pause()
        assert [m.process.pid for m in posted.of(KillRequested)] == [sleeper.pid]
        assert not isinstance(app.screen, KillScreen)
        assert any("read-only" in n for n in posted.notes())
        assert sleeper.poll() is None


# ---- config ------------------------------------------------------------------


async def test_remapped_keys_work_and_show_in_help() -> None:
    config = parse_config({"keys": {"quit": "x", "tree": "T"}})
    app = GputopApp(ReplayFeed(make_frames(3)), config=config)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")  # no longer bound
        assert app.is_running
        await pilot.press("T")
        assert not app.table.tree_mode
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        assert ("x", "quit") in app.screen.keys
        await pilot.press("escape", "x")
    assert app.return_code == 0


async def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = replay_app(3)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.no_color
        assert "BUSY BUT STARVING" in str(app.query_one(VerdictPanel).render())
