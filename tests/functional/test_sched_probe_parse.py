"""The probe's preflight on this machine: its tracefs format gives masks, and preflight says
why not or which loader, without importing bcc."""

from __future__ import annotations

import subprocess
import sys

from gputop.sources.bcc_loader import state_masks
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from tests.harness import ROOT


def test_masks_match_this_kernels_tracefs_when_readable():
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        try:
            with open(f"{d}/events/sched/sched_switch/format") as f:
                text = f.read()
        except OSError:
            continue
        masks = state_masks(text)
        assert masks is not None
        assert masks[0] & 0x3 == 0x3, "S and D must be not-runnable on any kernel"
        return


def test_preflight_names_a_reason_and_fix_or_a_loader_without_importing_bcc():
    got = preflight()
    if isinstance(got, Unavailable):
        assert got.reason
    else:
        assert got.loader in ("libbpf", "bcc") and got.why
    # bcc (and LLVM with it) is for the compiler child only: checked in a fresh
    # interpreter, since other tests in this one import bcc.
    code = (
        "import sys; from gputop.sources.probe_plan import preflight; preflight();"
        " print('bcc' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"
