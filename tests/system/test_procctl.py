"""py-spy dumps the stack of a real Python process (ptrace: root here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.procctl import pyspy_dump


def test_pyspy_dumps_a_real_python_stack() -> None:
    beside = Path(sys.executable).with_name("py-spy")
    if shutil.which("py-spy") is None and not beside.exists():
        pytest.skip("py-spy not installed (the pyspy extra)")
    if os.geteuid() != 0:
        pytest.skip("py-spy needs ptrace permission (root here)")
    code = (
        "import time\n"
        "def waiting_for_the_next_batch():\n    time.sleep(60)\n"
        "waiting_for_the_next_batch()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        out = ""
        while time.monotonic() < deadline:
            out = pyspy_dump(p.pid)
            if "waiting_for_the_next_batch" in out:
                break
            time.sleep(0.3)
        assert "waiting_for_the_next_batch" in out, out
    finally:
        p.kill()
        p.wait()
