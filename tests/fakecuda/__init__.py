"""A fake ``libcuda.so.1`` for tests: the driver's waiting calls, built from C with gcc.

``build_fake_cuda()`` compiles it once per source hash and returns the library's
path. A workload loads it with ``ctypes.CDLL(path)`` and says how its waiting calls
wait: ``fake_cuda_set(ns, spin)`` (each call waits ns, asleep or spinning) or
``fake_cuda_launch(ns)`` (queue ns of GPU work; a waiting call returns when it is
done, as a stream synchronization or a copy to pageable memory does). It exports
every entry point gputop probes (``PROBED_FUNCTIONS``) and ``cuGetProcAddress``, which
hands out their addresses the way the CUDA runtime asks for them. gputop finds it in
the process's ``/proc/PID/maps`` (a file named ``libcuda.so.1``) and probes it as
it would the real driver. ``caller.py`` beside it calls entry points on threads of
their own, each timing itself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_cuda.c"
BUILD_ROOT = HERE / "build"
SONAME = "libcuda.so.1"


def build_fake_cuda() -> Path:
    """Compile the fake (once per source hash); return the library's path."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    lib = BUILD_ROOT / digest / SONAME
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.parent / f".{SONAME}.{os.getpid()}.tmp"
    subprocess.run(
        [
            shutil.which("gcc") or "gcc",
            "-O2",
            "-fno-ipa-icf",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            f"-Wl,-soname,{SONAME}",
            "-o",
            str(tmp),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    os.replace(tmp, lib)
    return lib
