"""Find bcc's Python module, which comes from the distro (python3-bpfcc), not PyPI.

In a virtualenv the distro's dist-packages is not on sys.path. Rather than adding
that whole directory (which would shadow the venv's own packages), load only the
``bcc`` package from it. The PyPI distribution named ``bcc`` is an unrelated
library; it is recognised and refused.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from types import ModuleType

DISTRO_DIRS = ("/usr/lib/python3/dist-packages",)
INSTALL_FIX = "apt-get install python3-bpfcc (Debian/Ubuntu) or your distro's bcc Python package"

_cached: tuple[ModuleType | None, str | None] | None = None


def _is_real_bcc(mod: ModuleType) -> bool:
    return hasattr(mod, "BPF")


def bcc_present() -> bool:
    """Whether a module named bcc can be found, without importing it (LLVM costs ~65 MiB).

    The compiler child imports it and tells a real bcc from PyPI's namesake.
    """
    if "bcc" in sys.modules or importlib.util.find_spec("bcc") is not None:
        return True
    return any(os.path.exists(os.path.join(d, "bcc", "__init__.py")) for d in DISTRO_DIRS)


def find_bcc() -> tuple[ModuleType | None, str | None]:
    """(the bcc module, None) or (None, why it cannot be had); the fix is ``INSTALL_FIX``."""
    global _cached
    if _cached is not None:
        return _cached
    _cached = _find()
    return _cached


def _find() -> tuple[ModuleType | None, str | None]:
    mod = sys.modules.get("bcc")
    if mod is None:
        spec = importlib.util.find_spec("bcc")
        if spec is not None:
            try:
                import bcc as mod  # type: ignore[no-redef]
            except Exception as exc:  # noqa: BLE001 - any import failure is a reason
                return None, f"bcc failed to import: {exc!r}"
    if mod is not None:
        if _is_real_bcc(mod):
            return mod, None
        return None, "the 'bcc' on sys.path is not BPF Compiler Collection"
    for d in DISTRO_DIRS:
        init = os.path.join(d, "bcc", "__init__.py")
        if not os.path.exists(init):
            continue
        spec = importlib.util.spec_from_file_location(
            "bcc", init, submodule_search_locations=[os.path.join(d, "bcc")]
        )
        if spec is None or spec.loader is None:
            continue
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bcc"] = mod
        try:
            # Compiled from source here (no .pyc for this interpreter), bcc's own regexes
            # raise escape-sequence warnings that would land on the user's terminal.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
                spec.loader.exec_module(mod)
        except Exception as exc:  # noqa: BLE001 - libbcc.so missing, ABI mismatch...
            del sys.modules["bcc"]
            return None, f"bcc found in {d} but failed to load: {exc!r}"
        return mod, None
    return None, "bcc (BPF Compiler Collection) is not installed"
