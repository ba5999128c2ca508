"""The trainer-work demo's stand-in CUDA driver (``demo_cuda.c``), built with the system's
C compiler once per source and kept in the user's cache.

Its file is named ``libcuda.so.1`` and exports ``cuCtxSynchronize``, so the eBPF probe
measures the demo trainer's wait for its modelled GPU the way it measures a real
trainer's (the real driver's calls, by uprobes): without it the trainer's own work
could not be told from a wait for the GPU, and the demo could not show ``host_bound``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from gputop.errors import UsageError

SOURCE = Path(__file__).with_name("demo_cuda.c")
SONAME = "libcuda.so.1"


def compiler() -> str:
    """The C compiler's path; UsageError where there is none."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise UsageError(
            "the trainer-work demo needs a C compiler (cc) to build its stand-in CUDA library"
        )
    return cc


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gputop`` (``~/.cache/gputop``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gputop"


def build() -> Path:
    """The built library's path (compiled the first time for this source)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    lib = cache_dir() / "demo-cuda" / digest / SONAME
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = lib.parent / f".{SONAME}.{os.getpid()}.tmp"
    argv = [compiler(), "-O2", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o", str(tmp)]
    try:
        subprocess.run([*argv, str(SOURCE)], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or "").strip().splitlines()
        raise UsageError(
            f"the trainer-work demo could not build its stand-in CUDA library: "
            f"{why[-1] if why else f'cc exited with status {exc.returncode}'}"
        ) from None
    os.replace(tmp, lib)
    return lib
