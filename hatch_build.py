"""Wheel build hook: ship the eBPF probe object, rebuilt with clang when the machine has it.

Without clang the object committed in ``bpf/`` ships, so ``pip install .``
needs no compiler. With clang the object is rebuilt from ``bpf/`` (it records
the same hash of its inputs; the bytes may differ between compiler versions);
a failed build keeps the committed one and says why.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
TARGET = "gputop/bpf"


def _bpf_build() -> Any:
    """gputop/sources/bpf_build.py by path: the build environment has none of gputop's deps."""
    path = ROOT / "gputop" / "sources" / "bpf_build.py"
    spec = importlib.util.spec_from_file_location("_gputop_bpf_build", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class CustomBuildHook(BuildHookInterface):
    """Adds ``bpf/`` to the wheel as ``gputop/bpf/``, with a freshly built object where possible."""

    _tmp: str | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        build = _bpf_build()
        bpf = ROOT / "bpf"
        include = build_data["force_include"]
        for f in sorted(bpf.iterdir()):
            if f.is_file() and f.name != build.OBJECT_NAME:
                include[str(f)] = f"{TARGET}/{f.name}"
        obj = bpf / build.OBJECT_NAME
        clang = build.find_clang()
        if clang is not None:
            self._tmp = tempfile.mkdtemp(prefix="gputop-bpf-")
            fresh = Path(self._tmp) / build.OBJECT_NAME
            try:
                build.compile_object(bpf, fresh, clang)
                obj = fresh
            except build.BuildError as exc:
                self.app.display_warning(f"eBPF probe not rebuilt ({exc}); shipping bpf/{obj.name}")
        include[str(obj)] = f"{TARGET}/{build.OBJECT_NAME}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
