"""Lint and types are part of the suite, so CI holds every commit to them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import ROOT, gputop_env

BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=gputop_env())


def test_ruff_lint_and_format_are_clean():
    lint = run(str(BIN / "ruff"), "check", ".")
    assert lint.returncode == 0, lint.stdout
    fmt = run(str(BIN / "ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout


def test_mypy_strict_on_the_package():
    r = run(sys.executable, "-m", "mypy", "gputop")
    assert r.returncode == 0, r.stdout
