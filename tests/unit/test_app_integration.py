"""Replaying a file that is not a bundle is a usage error, before any screen starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gputop.config import Config
from gputop.errors import UsageError
from gputop.runtime import Options
from gputop.tui import run_app


def _args(**kw: object) -> argparse.Namespace:
    base = {"replay": None, "readonly": False, "no_redact": False, "demo": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_replay_of_a_bad_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError):
        run_app(_args(replay=str(bad)), Options(), Config())
