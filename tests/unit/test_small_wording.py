"""The small words a user reads: counts agree with their nouns, a JSON error names its place
once, a trainer's label is never a fragment of its name, a home path reads as ``~``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.app import home_short
from gputop.errors import UsageError
from gputop.model.window import HostAgg
from gputop.model.wording import host_line, plural
from gputop.snapshot.loader import load_bundle
from gputop.widgets.wait_bars import label_text


def test_one_runnable_task_is_one_task() -> None:
    assert plural(1, "runnable task") == "1 runnable task"
    assert plural(0.6, "runnable task") == "1 runnable task"
    assert plural(9, "runnable task") == "9 runnable tasks"
    host = HostAgg(cpu_pct=16.0, ncpu=2, load1=1.9, procs_running=1.0, psi_cpu_some=None)
    assert host_line(host).startswith("1 runnable task on 2 CPUs;")


def test_a_json_error_names_its_place_once(tmp_path: Path) -> None:
    p = tmp_path / "cut.json"
    p.write_text('{"schema": "gputop.snapshot/1", "host": "abc')
    with pytest.raises(UsageError) as info:
        load_bundle(str(p))
    msg = str(info.value)
    assert "at at" not in msg
    assert msg.endswith("Unterminated string starting at (line 1, column 41)"), msg


@pytest.mark.parametrize(
    ("pid", "comm", "width", "label"),
    [
        (3821, "python3", 14, "3821 python3"),
        (11128, "demo_trainer", 14, "11128 demo_tr…"),
        (3821, "python3", 8, "3821 py…"),
        # Two letters of a name are no name: the pid alone, never "11128 de".
        (11128, "demo_trainer", 8, "11128"),
        (11128, "", 8, "11128"),
    ],
)
def test_a_trainers_label_is_its_pid_and_a_readable_name_or_the_pid_alone(
    pid: int, comm: str, width: int, label: str
) -> None:
    assert label_text(pid, comm, width) == label
    assert len(label) <= width


def test_a_path_under_home_reads_as_tilde() -> None:
    home = os.path.expanduser("~")
    assert home_short(os.path.join(home, ".local", "x.json")) == "~/.local/x.json"
    assert home_short("/var/tmp/x.json") == "/var/tmp/x.json"
