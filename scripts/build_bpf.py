"""Build the ahead-of-time eBPF probe (bpf/sched_probe.bpf.o) and the headers it is built from.

    python scripts/build_bpf.py            regenerate bpf/probe_abi.h, compile the object with clang
    python scripts/build_bpf.py --check    fail (exit 1) when probe_abi.h or the object is stale
    python scripts/build_bpf.py --vmlinux  regenerate bpf/vmlinux.h from this kernel's BTF (bpftool)

The object is committed, so installing gputop needs no compiler; the wheel's
build hook rebuilds it when clang is present. After changing bpf/*.c, bpf/*.h
or gputop/model/probe_abi.py, run this and commit the object with the change.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BPF = ROOT / "bpf"


def _load(name: str) -> ModuleType:
    """A standard-library-only module of gputop, by path (no gputop dependencies)."""
    path = ROOT / "gputop" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_gputop_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    ap.add_argument("--vmlinux", action="store_true", help="regenerate bpf/vmlinux.h first")
    ap.add_argument("-o", "--output", type=Path, help="write the object here instead")
    args = ap.parse_args()
    build = _load("sources/bpf_build")
    abi = _load("model/probe_abi")
    if args.check:
        problems = build.stale_inputs(BPF, abi.c_header())
        for p in problems:
            print(f"build_bpf: {p}; run python scripts/build_bpf.py", file=sys.stderr)
        return 1 if problems else 0
    if args.vmlinux:
        text = build.trim_vmlinux(build.dump_vmlinux(), build.VMLINUX_ROOTS, os.uname().release)
        (BPF / "vmlinux.h").write_text(text)
    (BPF / "probe_abi.h").write_text(abi.c_header())
    clang = build.find_clang()
    if clang is None:
        print("build_bpf: no clang on PATH (set GPUTOP_CLANG to one)", file=sys.stderr)
        return 2
    out = args.output or BPF / build.OBJECT_NAME
    try:
        digest = build.compile_object(BPF, out, clang)
    except build.BuildError as exc:
        print(f"build_bpf: {exc}", file=sys.stderr)
        return 1
    print(f"{out} ({out.stat().st_size} bytes, inputs {digest[:16]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
