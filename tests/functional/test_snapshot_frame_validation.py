"""Loading frames never imports the UI: the headless modules checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_headless_modules_never_import_textual() -> None:
    code = (
        "import sys\n"
        "import gputop.snapshot, gputop.redact, gputop.doctor, gputop.export\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
