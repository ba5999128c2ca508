"""Fixtures shared by the three tiers (tests/unit, tests/functional, tests/system).

Plain helpers live in helper modules beside this file (``tests/harness.py`` runs
gputop as a subprocess; ``procutil``, ``bpfutil``, ``fakeproc``, ``fakenvml``,
``frames_fixture`` ...); test modules import those, never another test module.
"""

from __future__ import annotations

import compileall
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.snapshot import write_bundle
from tests.bundles import small_frames
from tests.exportutil import exporting
from tests.harness import PY, ROOT, run_gputop
from tests.pilotutil import Posted

# The eBPF probe's fixtures (``probe``, ``cuda_lib``) for the system tests that measure with it.
pytest_plugins = ["tests.probeticks"]

# System-test modules that assert nothing about time or CPU shares (what they check holds on
# a busy machine too: fds, programs, files, exit statuses, replays), so they may run beside
# other tests. Every other system test is marked ``serial``: it measures against its own
# clock or the kernel's and runs alone (scripts/install-and-test.sh runs the ``serial`` ones
# one at a time after the rest, which run on four workers).
SHAREABLE_SYSTEM_MODULES = frozenset(
    {
        "test_bpf_handover",
        "test_bpf_release",
        "test_cgroup",
        "test_cli",
        "test_cuda_attach",
        "test_demo_exit",
        "test_detach",
        "test_doctor",
        "test_export",
        "test_gpu_check",
        "test_loader_contract",
        "test_lost_replay",
        "test_nvml_pidns",
        "test_probe_footprint",
        "test_procctl",
        "test_prometheus",
        "test_ranks_in_namespace",
        "test_roles",
        "test_roundtrip",
        "test_slurm",
        "test_snapshot",
        "test_terminal",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name == "system" and path.stem not in SHAREABLE_SYSTEM_MODULES:
            item.add_marker(pytest.mark.serial)
        elif item.get_closest_marker("serial") is not None:
            # scripts/install-and-test.sh runs the serial batch from tests/system alone.
            raise pytest.UsageError(f"{item.nodeid}: serial tests belong in tests/system")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile gputop's modules and the test helpers once, into their ``__pycache__``.

    Every gputop and helper process the tests start imports them again, and this machine
    sets PYTHONDONTWRITEBYTECODE=1, so none of them would write the bytecode it compiled:
    each start compiled gputop's modules from source (0.2-0.3 s of CPU for the TUI's
    imports). Python still reads bytecode it finds, and checks it against the source's
    mtime and size, so an edited module is compiled afresh, never run stale. Once per run:
    not again in each pytest-xdist worker.
    """
    if hasattr(session.config, "workerinput"):
        return
    for tree in (ROOT / "gputop", ROOT / "tests"):
        compileall.compile_dir(tree, quiet=1, workers=1)


# Seconds each test file took (set-up, call and tear-down of all its tests), summed in the
# process that reports: under pytest-xdist the controller, which gets every worker's reports.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The slowest test files, the unit a suite-time budget is spent in."""
    if not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:20]
    terminalreporter.section("slowest 20 files")
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.2f}s {path}")
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_line(f"{total:8.2f}s in all {len(_FILE_SECONDS)} files")


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


@pytest.fixture
def exporter() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running ``gputop export --no-bpf`` on loopback and its metrics URL."""
    with exporting() as running:
        yield running


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A valid snapshot bundle of ``small_frames()``, as the JSON document write_bundle wrote."""
    d = tmp_path_factory.mktemp("good")
    path = write_bundle(small_frames(), {"host": {"kernel": "x"}}, str(d), None, True)
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc
