"""Finding py-spy: on the given search path only, and one install hint shared with doctor."""

from __future__ import annotations

from pathlib import Path

from gputop.doctor import check_pyspy
from gputop.procctl import PYSPY_INSTALL_HINT, find_pyspy, pyspy_dump


def test_pyspy_is_found_on_the_given_search_path_only(tmp_path: Path) -> None:
    assert find_pyspy(str(tmp_path)) is None
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    assert find_pyspy(str(tmp_path)) == str(exe)


def test_pyspy_missing_gives_one_install_hint_shared_with_doctor(tmp_path: Path) -> None:
    text = pyspy_dump(1, search_path=str(tmp_path))
    assert text.startswith("py-spy is not installed") and PYSPY_INSTALL_HINT in text
    assert check_pyspy(str(tmp_path)).fix == PYSPY_INSTALL_HINT
