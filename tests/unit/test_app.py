"""The app's pieces without running it: the config file and its errors, sparklines, the
process table's filter and command column, the drill-down's histogram."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gputop.app import GputopApp
from gputop.config import Config, load_config, parse_config
from gputop.errors import UsageError
from gputop.screens.process import histogram_lines
from gputop.widgets.sparkline import sparkline
from gputop.widgets.table_layout import arrange
from tests.frames_fixture import OTHER_TRAINER_PID, WORKER_PIDS, PushFeed, make_frame

# ---- config ------------------------------------------------------------------


def test_config_missing_file_is_the_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "none.toml") == Config()


def test_config_is_read_from_xdg_config_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gputop").mkdir()
    (tmp_path / "gputop" / "config.toml").write_text(
        'interval = 2\ntheme = "nord"\nsnapshot_dir = "/tmp/snaps"\n'
        '[keys]\nquit = "x, f10"\n[thresholds]\nstarving_offcpu_pct = 40\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = load_config()
    assert cfg.interval_s == 2.0 and cfg.theme == "nord" and cfg.snapshot_dir == "/tmp/snaps"
    assert cfg.keys == {"quit": "x,f10"}
    assert cfg.thresholds == {"starving_offcpu_pct": 40}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("interval = [", "config.toml"),
        ("interval = 0.01", "at least"),
        ('interval = "fast"', "number"),
        ("colour = 1", "unknown setting"),
        ("[keys]\nquit = 3", "[keys]"),
        ("thresholds = 3", "[thresholds]"),
    ],
)
def test_bad_config_is_one_line_usage_error(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_config(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_binding_or_theme_in_config_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown key binding 'explode'"):
        GputopApp(PushFeed(), config=parse_config({"keys": {"explode": "x"}}))
    with pytest.raises(UsageError, match="unknown theme"):
        GputopApp(PushFeed(), config=parse_config({"theme": "no-such-theme"}))


# ---- pieces ------------------------------------------------------------------


def test_sparkline_draws_none_as_a_gap_never_as_zero() -> None:
    assert sparkline([0.0, None, 100.0], 5) == "  ▁·█"
    assert sparkline([50.0] * 10, 4) == "▅▅▅▅"
    assert sparkline([150.0, -3.0], 2) == "█▁"


def test_arrange_filter_matches_user_role_and_command() -> None:
    procs = make_frame(0).processes
    assert {p.pid for p, _ in arrange(procs, needle="bob")} == {OTHER_TRAINER_PID, 4120}
    assert {p.pid for p, _ in arrange(procs, needle="LOADER")} == {*WORKER_PIDS, 4120}
    # A worker whose trainer is filtered out stands at the top level.
    assert all(prefix == "" for _, prefix in arrange(procs, needle="loader"))


def test_histogram_lines_cover_the_nonzero_log2_buckets() -> None:
    lines = histogram_lines((0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 8, 0, 2), width=8)
    assert len(lines) == 4
    assert lines[0].split()[0] == "≥1.02µs" and lines[0].endswith(" 4")
    assert "████████" in lines[1]
    assert histogram_lines((0, 0)) == ["no off-CPU stalls recorded"]


@pytest.mark.parametrize(
    ("comm", "cmdline", "shown"),
    [
        ("python3", "/usr/bin/python3 train.py", "/usr/bin/python3 train.py"),
        ("pt_data_worker", "python3 train.py", "pt_data_worker: python3 train.py"),
        ("cpu_hog", "/v/bin/python -m demo", "cpu_hog: /v/bin/python -m demo"),
        ("kworker/0:1", "", "[kworker/0:1]"),
        ("pt_data_pin", "[thread pt_data_pin of 7]", "[thread pt_data_pin of 7]"),
        ("stress-ng-cpu", "stress-ng-cpu [run]", "stress-ng-cpu [run]"),
    ],
)
def test_command_column_names_renamed_processes(comm: str, cmdline: str, shown: str) -> None:
    from gputop.widgets.table_layout import command_text

    p = replace(make_frame(0).processes[0], comm=comm, cmdline=cmdline)
    assert command_text(p) == shown
