"""`gputop doctor` from outside: the capability bits it checks, a run, and one row of its
report."""

from __future__ import annotations

import os
import subprocess

from tests.harness import run_gputop

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39


def run_doctor(
    cmd_prefix: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`gputop doctor` run to its end behind ``cmd_prefix`` (e.g. unshare), 200 columns wide."""
    return run_gputop(
        "doctor",
        prefix=tuple(cmd_prefix),
        timeout=120,
        env={**(os.environ if env is None else env), "COLUMNS": "200"},
    )


def row(out: str, name: str) -> str:
    """The report's row of the check named ``name``."""
    return next(line for line in out.splitlines() if line.strip().startswith(name))
