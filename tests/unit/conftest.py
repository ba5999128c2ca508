"""The unit tier: pure tests that run in seconds as any user.

No root, no process of their own, no sleeps, no Textual Pilot, no compiled fake NVML,
no torch: data in, data out (a fake /proc tree under tmp_path is fine). Each test runs
with starting a process, sleeping and Pilot turned into errors, so a test that needs
one of them fails here and belongs in tests/functional or tests/system; and with
XDG_CONFIG_HOME and XDG_STATE_HOME in an empty directory of its own, so whoever runs
the tier, their config file is not read and their state directory not written.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.app import App


class ImpureTest(AssertionError):
    """A unit test started a process, slept or drove the app."""


def _refuse(what: str) -> Any:
    def refused(*_args: object, **_kw: object) -> None:
        raise ImpureTest(f"unit tests may not {what}: move the test to tests/functional")

    return refused


@pytest.fixture(scope="session")
def empty_xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG base directory holding nothing: no config file, no state."""
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture(autouse=True)
def pure(monkeypatch: pytest.MonkeyPatch, empty_xdg: Path) -> Iterator[None]:
    """Starting a process, sleeping or a Pilot run fails the test (sleep(0), a yield, is fine)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(empty_xdg / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(empty_xdg / "state"))
    sleep = time.sleep

    def no_sleep(seconds: float) -> None:
        if seconds > 0:
            raise ImpureTest("unit tests may not sleep: move the test to tests/functional")
        sleep(seconds)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("start a process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse("start a process"))
    monkeypatch.setattr(time, "sleep", no_sleep)
    monkeypatch.setattr(App, "run_test", _refuse("drive the app with Pilot"))
    yield
