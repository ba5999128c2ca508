"""Fixtures shared by the three tiers (tests/unit, tests/functional, tests/system).

Plain helpers live in helper modules beside this file (``tests/harness.py`` runs
gputop as a subprocess; ``procutil``, ``bpfutil``, ``fakeproc``, ``fakenvml``,
``frames_fixture`` ...); test modules import those, never another test module.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.harness import PY, Posted, run_gputop


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process to signal or watch; killed at teardown whatever the test did to it."""
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def gputop() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_gputop`` for tests that take it as a fixture."""
    return run_gputop


@pytest.fixture
def posted() -> Posted:
    """A message hook that records what the app dispatched, for asserting on messages."""
    return Posted()
