"""Does ``cuGetProcAddress`` hand out the functions gputop probes? (scripts/gpu_check.py)

The CUDA runtime does not call the driver's exports by name: it asks
``cuGetProcAddress`` for each entry point (a base name, its CUDA version, the
per-thread default stream or not) and calls the pointer it gets. gputop's uprobes sit
at the exported functions (their ``.dynsym`` offsets), so they see those calls only
if the pointers are those exports. This asks the driver (``libcuda.so.1``, or
``--lib``) for every base name of a probed entry point, in both stream modes, at the
runtime's CUDA version and the driver's, and names what each pointer is (``dladdr``)
and whether it is a probed export. One JSON object goes to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.sources.cuda_probe import PROBED_FUNCTIONS  # noqa: E402

LEGACY_STREAM = 1  # CU_GET_PROC_ADDRESS_LEGACY_STREAM
PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
# The CUDA versions a runtime of CUDA 12 or 13 asks for.
RUNTIME_VERSIONS = (12000, 13000)


class DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def base_name(name: str) -> str:
    """The name cuGetProcAddress takes: no per-thread suffix, no version suffix."""
    return name.removesuffix("_ptsz").removesuffix("_ptds").removesuffix("_v2")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="libcuda.so.1")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        lib = ctypes.CDLL(args.lib)
    except OSError as exc:
        print(f"gpu_check_procaddr: cannot load {args.lib}: {exc}", file=sys.stderr)
        return 1
    libc = ctypes.CDLL(None)
    init_rc = lib.cuInit(0)
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    exports = {}
    for name in PROBED_FUNCTIONS:
        try:
            exports[name] = ctypes.cast(lib[name], ctypes.c_void_p).value
        except AttributeError:
            continue
    by_address = {a: n for n, a in exports.items()}
    get = getattr(lib, "cuGetProcAddress_v2", None)
    lookups = []
    versions = sorted({*RUNTIME_VERSIONS, version.value} - {0})
    for base in sorted({base_name(n) for n in PROBED_FUNCTIONS}):
        for flags in (LEGACY_STREAM, PER_THREAD):
            for v in versions:
                fn = ctypes.c_void_p()
                if get is not None:
                    status = ctypes.c_int(-1)
                    rc = get(
                        base.encode(),
                        ctypes.byref(fn),
                        v,
                        ctypes.c_ulonglong(flags),
                        ctypes.byref(status),
                    )
                else:
                    rc = lib.cuGetProcAddress(
                        base.encode(), ctypes.byref(fn), v, ctypes.c_ulonglong(flags)
                    )
                symbol = None
                if fn.value:
                    info = DlInfo()
                    if (
                        libc.dladdr(ctypes.c_void_p(fn.value), ctypes.byref(info))
                        and info.dli_sname
                    ):
                        symbol = info.dli_sname.decode()
                        if info.dli_saddr != fn.value:
                            symbol += f"+{fn.value - (info.dli_saddr or 0):#x}"
                lookups.append(
                    {
                        "base": base,
                        "flags": "per-thread" if flags == PER_THREAD else "legacy",
                        "version": v,
                        "rc": rc,
                        "address": fn.value or 0,
                        "symbol": symbol,
                        "probed": fn.value in by_address,
                        "probed_as": by_address.get(fn.value or 0),
                    }
                )
    info = DlInfo()
    path = None
    if exports and libc.dladdr(ctypes.c_void_p(next(iter(exports.values()))), ctypes.byref(info)):
        path = info.dli_fname.decode() if info.dli_fname else None
    report = {
        "library": path,
        "cuInit": init_rc,
        "driver_version": version.value,
        "exported": sorted(exports),
        "not_exported": sorted(set(PROBED_FUNCTIONS) - set(exports)),
        "lookups": lookups,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
