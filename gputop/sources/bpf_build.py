"""Building the ahead-of-time probe object: its inputs and their hash, clang, vmlinux.h.

Used by ``scripts/build_bpf.py`` (developers), the wheel's build hook
(``hatch_build.py``, which imports this file by path: standard library only) and
the tests. The object records the SHA-256 of its inputs (the C sources, the
generated headers and the compile flags) in its ``gputop.inputs`` section, so a
shipped object can be checked against the current source without comparing
bytes, which differ between compiler versions.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

OBJECT_NAME = "sched_probe.bpf.o"
SOURCE_NAME = "sched_probe.c"
# Every file the object is built from, in hashing order (all in bpf/).
INPUT_NAMES = (SOURCE_NAME, "dialect.h", "probe_abi.h", "vmlinux.h")
# Little-endian BPF: x86_64, aarch64, riscv64, ppc64le. -g emits the BTF that
# describes the maps and carries the CO-RE relocations.
CFLAGS = ("-target", "bpfel", "-O2", "-g", "-DGPUTOP_CORE", "-Wall", "-Werror")
HASH_SECTION = "gputop.inputs"
CLANG_ENV = "GPUTOP_CLANG"

# The kernel types the probe names (the sched_process_exit record only to tell which
# arguments that event passes; task_struct's few fields are in dialect.h) and the
# typedefs it uses; vmlinux.h keeps these and what they need.
VMLINUX_ROOTS = (
    "trace_event_raw_sched_process_exit",
    "pid_t",
    "u8",
    "u32",
    "u64",
    "s32",
    "s64",
    "bool",
)


def inputs_sha256(bpf_dir: Path) -> str:
    """SHA-256 over the inputs' names and bytes and the compile flags."""
    # Imported here: hashlib loads OpenSSL (about 5 MiB resident), which the long-lived
    # process, importing this module for OBJECT_NAME only, should not carry.
    import hashlib

    h = hashlib.sha256()
    for name in INPUT_NAMES:
        data = (bpf_dir / name).read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    h.update("\0".join(CFLAGS).encode())
    return h.hexdigest()


def find_clang() -> str | None:
    """clang that can target BPF: ``$GPUTOP_CLANG``, else ``clang`` or a versioned one on PATH."""
    want = os.environ.get(CLANG_ENV)
    if want:
        return shutil.which(want)
    for name in ("clang", *(f"clang-{v}" for v in range(20, 10, -1))):
        path = shutil.which(name)
        if path:
            return path
    return None


class BuildError(Exception):
    """clang failed; the message carries its first error line."""


def compile_object(bpf_dir: Path, out: Path, clang: str) -> str:
    """Build the CO-RE object from ``bpf_dir`` into ``out``; returns the inputs' hash."""
    digest = inputs_sha256(bpf_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp_out = Path(tmp) / OBJECT_NAME
        cmd = [
            clang,
            *CFLAGS,
            f'-DGPUTOP_INPUTS_SHA256="{digest}"',
            "-I",
            str(bpf_dir),
            "-c",
            str(bpf_dir / SOURCE_NAME),
            "-o",
            str(tmp_out),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            lines = [ln for ln in r.stderr.splitlines() if "error" in ln] or r.stderr.splitlines()
            raise BuildError(lines[0] if lines else f"clang exited with {r.returncode}")
        os.replace(tmp_out, out)
    return digest


def elf_section(path: Path, name: str) -> bytes | None:
    """The bytes of section ``name`` of a 64-bit little-endian ELF file; None if absent."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        (name_off,) = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name_off, offset, size

    _, str_off, _ = header(shstrndx)
    for i in range(shnum):
        name_off, offset, size = header(i)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off : end].decode() == name:
            return data[offset : offset + size]
    return None


def object_inputs_sha256(path: Path) -> str | None:
    """The inputs' hash an object records; None for an object without one."""
    raw = elf_section(path, HASH_SECTION)
    return raw.rstrip(b"\0").decode() if raw else None


def stale_inputs(bpf_dir: Path, abi_header: str) -> list[str]:
    """What in ``bpf_dir`` no longer matches the sources, one line each ([] when nothing).

    ``abi_header``: the text ``probe_abi.c_header()`` generates now.
    """
    problems = []
    if (bpf_dir / "probe_abi.h").read_text() != abi_header:
        problems.append("bpf/probe_abi.h does not match gputop/model/probe_abi.py")
    obj = bpf_dir / OBJECT_NAME
    want = inputs_sha256(bpf_dir)
    have = object_inputs_sha256(obj) if obj.exists() else None
    if have != want:
        problems.append(
            f"bpf/{OBJECT_NAME} was built from other sources"
            f" (it records {have or 'no hash'}, the sources hash to {want})"
        )
    return problems


# ---- vmlinux.h ------------------------------------------------------------------

_DECL_NAME = re.compile(
    r"^(?:typedef\s[^{]*?\(?\*?\s*(\w+)\)?(?:\(.*\))?(?:\[\w*\])*;"
    r"|typedef\s.*\}\s*(\w+);"
    r"|(struct|union|enum)\s+(\w+)\s*\{)",
    re.S,
)
_WORD = re.compile(r"\b(struct|union|enum)\s+(\w+)|\b(\w+)\b")


def _declarations(text: str) -> list[tuple[str, str]]:
    """(name, text) of each top-level definition in bpftool's C dump."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        m = _DECL_NAME.match(block)
        if not m:
            continue
        if m.group(1) or m.group(2):
            out.append((m.group(1) or m.group(2), block))
        else:
            out.append((f"{m.group(3)} {m.group(4)}", block))
    return out


def trim_vmlinux(full: str, roots: Iterable[str], release: str) -> str:
    """vmlinux.h with only ``roots`` and every definition they need, in bpftool's order."""
    decls = _declarations(full)
    by_name = {name: text for name, text in decls}
    want: set[str] = set()
    todo = [r if r in by_name else f"struct {r}" for r in roots]
    while todo:
        name = todo.pop()
        if name in want or name not in by_name:
            continue
        want.add(name)
        body = by_name[name].split("{", 1)[-1] if "{" in by_name[name] else by_name[name]
        for m in _WORD.finditer(body):
            ref = f"{m.group(1)} {m.group(2)}" if m.group(1) else m.group(3)
            if ref != name:
                todo.append(ref)
    kept = [text for name, text in decls if name in want]
    missing = [r for r in roots if r not in want and f"struct {r}" not in want]
    if missing:
        raise BuildError(f"this kernel's BTF lacks {', '.join(missing)}")
    head = (
        f"// Generated by scripts/build_bpf.py --vmlinux from `bpftool btf dump file"
        f" /sys/kernel/btf/vmlinux format c`\n// (Linux {release}), trimmed to the types"
        " the probe reads: do not edit.\n"
        "#ifndef __VMLINUX_H__\n#define __VMLINUX_H__\n\n"
        "#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)\n"
    )
    tail = "\n#pragma clang attribute pop\n\n#endif /* __VMLINUX_H__ */\n"
    return head + "\n" + "\n\n".join(kept) + "\n" + tail


def dump_vmlinux(btf: str = "/sys/kernel/btf/vmlinux") -> str:
    """bpftool's C dump of the running kernel's BTF."""
    r = subprocess.run(
        ["bpftool", "btf", "dump", "file", btf, "format", "c"],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout
