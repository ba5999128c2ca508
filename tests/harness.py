"""Running this checkout's gputop as a subprocess.

``gputop_cmd`` is the argv, ``run_gputop`` runs it to the end and ``start_gputop``
leaves it running; both use this checkout (``ROOT`` as the working directory and
first on PYTHONPATH) and text pipes. ``user_config`` writes a config file for them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def gputop_cmd(*args: str) -> list[str]:
    """The argv that runs this checkout's gputop with these arguments."""
    return [PY, "-m", "gputop", *args]


def gputop_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) with this checkout first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def run_gputop(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    prefix: tuple[str, ...] = (),
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``gputop ARGS`` (behind ``prefix``, e.g. unshare) to the end; output captured as text.

    ``env`` is the whole environment (default ``gputop_env()``); stdin is /dev/null unless given.
    """
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(
        [*prefix, *gputop_cmd(*args)],
        cwd=ROOT,
        env=gputop_env() if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def start_gputop(
    *args: str, env: Mapping[str, str] | None = None, **kw: Any
) -> subprocess.Popen[str]:
    """Start ``gputop ARGS`` with stdout and stderr piped as text; the caller ends it."""
    return subprocess.Popen(
        gputop_cmd(*args),
        cwd=ROOT,
        env=gputop_env() if env is None else dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def user_config(tmp_path: Path, text: str) -> dict[str, str]:
    """``text`` as the config file under ``tmp_path``; the environment that makes gputop read it."""
    (tmp_path / "gputop").mkdir(exist_ok=True)
    (tmp_path / "gputop" / "config.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path)}


def as_nobody() -> tuple[str, ...]:
    """The prefix that runs a command as user nobody: ``setpriv`` as root, allowed to read
    (only read) what root's checkout keeps in a 0700 directory, as a clean clone under a
    private temporary directory; nothing when the tests already run as a user. Skips the
    test where root has no ``setpriv``."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv to run gputop as a user other than root")
    return (
        setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
    )  # fmt: skip
