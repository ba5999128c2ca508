"""Load the ahead-of-time probe object with libbpf (``libbpf.so.1``, through ctypes) and attach it.

Where the kernel has BTF, gputop needs no compiler and no kernel headers: the
CO-RE object ``bpf/sched_probe.bpf.o`` (built by ``scripts/build_bpf.py``) is
opened by libbpf, which relocates the tracepoint records' fields against the
running kernel's BTF. Before loading, the map bounds are resized and the
program's ``probe_config`` (.rodata) is set for this node; after loading,
every program and map descriptor is duplicated and the libbpf object is
closed, so libbpf's copies of the ELF file and the kernel's BTF are freed at
once. The programs are attached as raw tracepoints (``BPF_RAW_TRACEPOINT_OPEN``),
one BPF link per tracepoint: closing a link never waits for an RCU grace period
in the kernel, so gputop's exit cannot hang on a node whose CPUs are saturated
(closing a perf-event tracepoint, bcc's way, can wait minutes there).

The result is the same ``Handover`` the bcc path produces: attachments, programs
and maps held only by file descriptors of this process, which the kernel
releases when it exits by any path.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gputop.model.probe_abi import ProbeConfig, arg2_reg
from gputop.sources.bpf_attach import BPF_TRACE_UPROBE_MULTI, Attachment, attach_raw_tracepoint
from gputop.sources.bpf_handover import Handover, MapFd, detach
from gputop.sources.bpf_syscall import prog_info
from gputop.sources.probe_loader import LoadError, LoadSpec, ProbeLoader

SONAME = "libbpf.so.1"
KERNEL_BTF = "/sys/kernel/btf/vmlinux"
_BTF_MAGIC = 0xEB9F
_INSTALL_FIX = "apt-get install libbpf1 (Debian/Ubuntu 23.04+; libbpf 1.x elsewhere)"

# BTF kinds (include/uapi/linux/btf.h).
_KIND_STRUCT = 4
_KIND_UNION = 5
_KIND_TYPEDEF = 8
_KIND_VOLATILE = 9
_KIND_CONST = 10
_KIND_RESTRICT = 11
_LIBBPF_WARN = 0


class LibbpfError(LoadError):
    """The object could not be opened, loaded or attached; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, "run `gputop doctor`: it checks libbpf, kernel BTF and tracefs")


class _BtfType(ctypes.Structure):
    _fields_ = (("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32))


class _BtfMember(ctypes.Structure):
    _fields_ = (
        ("name_off", ctypes.c_uint32),
        ("type", ctypes.c_uint32),
        ("offset", ctypes.c_uint32),
    )


_lib: Any = None
_lib_why: str | None = None
# libbpf's messages during the current load (its print callback; see _on_print).
_messages: list[str] = []
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def _on_print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf's print callback: keep warnings for a failure's reason, off the terminal."""
    if level != _LIBBPF_WARN or fmt is None:
        return 0
    text = fmt.decode(errors="replace")
    # On x86_64 a va_list argument is a pointer, so libc can format it; elsewhere
    # keep the format string, which still names what failed.
    if platform.machine() == "x86_64" and args:
        buf = ctypes.create_string_buffer(1024)
        libc = ctypes.CDLL(None)
        libc.vsnprintf(buf, ctypes.c_size_t(len(buf)), fmt, ctypes.c_void_p(args))
        text = buf.value.decode(errors="replace")
    _messages.append(text.strip())
    return 0


_print_cb = _PRINT_FN(_on_print)


def _declare(lib: Any) -> None:
    vp, cp, u32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "bpf_object__open_file": (vp, [cp, vp]),
        "bpf_object__load": (ctypes.c_int, [vp]),
        "bpf_object__close": (None, [vp]),
        "bpf_object__btf": (vp, [vp]),
        "bpf_object__next_map": (vp, [vp, vp]),
        "bpf_object__next_program": (vp, [vp, vp]),
        "bpf_map__name": (cp, [vp]),
        "bpf_map__fd": (ctypes.c_int, [vp]),
        "bpf_map__is_internal": (ctypes.c_bool, [vp]),
        "bpf_map__set_max_entries": (ctypes.c_int, [vp, u32]),
        "bpf_map__initial_value": (vp, [vp, ctypes.POINTER(ctypes.c_size_t)]),
        "bpf_map__btf_key_type_id": (u32, [vp]),
        "bpf_map__btf_value_type_id": (u32, [vp]),
        "bpf_program__name": (cp, [vp]),
        "bpf_program__fd": (ctypes.c_int, [vp]),
        "bpf_program__set_expected_attach_type": (ctypes.c_int, [vp, ctypes.c_int]),
        "btf__type_by_id": (ctypes.POINTER(_BtfType), [vp, u32]),
        "btf__load_vmlinux_btf": (vp, []),
        "btf__find_by_name_kind": (ctypes.c_int, [vp, cp, u32]),
        "btf__free": (None, [vp]),
        "btf__name_by_offset": (cp, [vp, u32]),
        "libbpf_version_string": (cp, []),
        "libbpf_set_print": (vp, [_PRINT_FN]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def find_libbpf() -> tuple[Any, str | None]:
    """(libbpf, None) or (None, why it cannot be had). Loaded once per process."""
    global _lib, _lib_why
    if _lib is None and _lib_why is None:
        try:
            lib = ctypes.CDLL(SONAME, use_errno=True)
            _declare(lib)
        except (OSError, AttributeError) as exc:
            _lib_why = f"{SONAME} cannot be loaded ({exc})"
        else:
            lib.libbpf_set_print(_print_cb)
            _lib = lib
    return _lib, _lib_why


def libbpf_version() -> str | None:
    """libbpf's version (e.g. "v1.1"), None when it cannot be loaded."""
    lib, _ = find_libbpf()
    return lib.libbpf_version_string().decode() if lib is not None else None


def kernel_btf_problem(path: str = KERNEL_BTF) -> str | None:
    """Why this kernel's BTF cannot be used for CO-RE; None when it can."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        return f"the kernel has no BTF ({path} is missing: CONFIG_DEBUG_INFO_BTF is off)"
    except OSError as exc:
        return f"cannot read {path} ({exc.strerror})"
    if len(head) < 2 or int.from_bytes(head[:2], "little") != _BTF_MAGIC:
        return f"{path} is not BTF"
    return None


def libbpf_fix() -> str:
    """How to get libbpf 1.x onto this node."""
    return _INSTALL_FIX


# BPF_PROG_TYPE_TRACING: a BTF-typed raw tracepoint (tp_btf), bound to its tracepoint at load.
_PROG_TYPE_TRACING = 26


@dataclass(frozen=True, slots=True)
class TracepointAttach:
    """One program to attach to one tracepoint (``category:event``) as a raw tracepoint."""

    program: str
    tracepoint: str

    @property
    def key(self) -> str:
        """The attachment's name in ``Handover.attachments``."""
        return f"raw_tracepoint:{self.tracepoint}"


def _struct_desc(lib: Any, btf: Any, type_id: int) -> Any:
    """bcc's JSON shape for a map key or value type: [name, [[field], ...], "struct"] or None."""
    for _ in range(16):  # typedef/const/volatile chains are short
        if not type_id:
            return None
        t = lib.btf__type_by_id(btf, type_id).contents
        kind = (t.info >> 24) & 0x1F
        if kind in (_KIND_TYPEDEF, _KIND_VOLATILE, _KIND_CONST, _KIND_RESTRICT):
            type_id = t.size  # the "type" member of the union
            continue
        if kind not in (_KIND_STRUCT, _KIND_UNION):
            return None
        vlen = t.info & 0xFFFF
        members = ctypes.cast(
            ctypes.addressof(t) + ctypes.sizeof(_BtfType), ctypes.POINTER(_BtfMember * vlen)
        ).contents
        fields = [[lib.btf__name_by_offset(btf, m.name_off).decode()] for m in members]
        name = lib.btf__name_by_offset(btf, t.name_off).decode()
        return [name, fields, "struct" if kind == _KIND_STRUCT else "union"]
    return None


def throttle_field(lib: Any) -> str | None:
    """The kernel field the probe reads to tell a throttled task (its cgroup's CPU limit).

    ``task_struct.throttled`` (Linux 6.18+, task-based throttling), else
    ``cfs_rq.throttle_count`` through ``sched_entity.cfs_rq``; None where this
    kernel's BTF has neither (no CONFIG_CFS_BANDWIDTH): the probe then cannot
    tell throttled time from other run-queue time.
    """
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return None
    try:

        def has(struct: str, member: str) -> bool:
            type_id = lib.btf__find_by_name_kind(btf, struct.encode(), _KIND_STRUCT)
            desc = _struct_desc(lib, btf, type_id) if type_id > 0 else None
            return desc is not None and any(f[0] == member for f in desc[1])

        if has("task_struct", "throttled"):
            return "task_struct.throttled"
        if has("sched_entity", "cfs_rq") and has("cfs_rq", "throttle_count"):
            return "cfs_rq.throttle_count"
        return None
    finally:
        lib.btf__free(btf)


def _iterate(fn: Any, obj: Any) -> Iterable[Any]:
    cur = fn(obj, None)
    while cur:
        yield cur
        cur = fn(obj, cur)


def _failure(what: str, err: int) -> LibbpfError:
    detail = next((m for m in _messages if "error" in m.lower() or "fail" in m.lower()), None)
    text = f"{what}: {os.strerror(err) if err else 'failed'}"
    if detail and detail not in text:
        text += f" ({detail[:200]})"
    return LibbpfError(text)


def load(
    object_path: Path,
    config: ctypes.Structure,
    max_entries: Mapping[str, int],
    attach: Sequence[TracepointAttach],
    attach_pairs: Sequence[tuple[TracepointAttach, TracepointAttach]] = (),
    uprobe_multi: Sequence[str] = (),
    optional: Sequence[TracepointAttach] = (),
) -> Handover:
    """Open, size, configure, load and attach the object; everything it holds is an fd of ours.

    ``max_entries``: map name -> bound. ``attach``: programs that must attach
    (a failure fails the load). ``attach_pairs``: (entry, exit) pairs attached
    exit first where this kernel has them, and skipped where it refuses either.
    ``uprobe_multi``: programs loaded for ``BPF_TRACE_UPROBE_MULTI`` (left unattached).
    ``optional``: programs attached where the kernel has their tracepoint, else skipped.
    Raises ``LibbpfError`` with one line saying what failed.
    """
    lib, why = find_libbpf()
    if lib is None:
        raise LibbpfError(str(why))
    started = time.monotonic()
    _messages.clear()
    obj = lib.bpf_object__open_file(str(object_path).encode(), None)
    if not obj:
        raise _failure(f"cannot open {object_path}", ctypes.get_errno())
    programs: dict[str, int] = {}
    maps: dict[str, MapFd] = {}
    attachments: dict[str, Attachment] = {}
    try:
        _configure(lib, obj, config, max_entries)
        for p in _iterate(lib.bpf_object__next_program, obj):
            if lib.bpf_program__name(p).decode() in uprobe_multi:
                lib.bpf_program__set_expected_attach_type(p, BPF_TRACE_UPROBE_MULTI)
        err = lib.bpf_object__load(obj)
        if err:
            raise _failure("the kernel refused the BPF program", -err)
        btf = lib.bpf_object__btf(obj)
        for m in _iterate(lib.bpf_object__next_map, obj):
            if lib.bpf_map__is_internal(m):
                continue
            maps[lib.bpf_map__name(m).decode()] = MapFd(
                os.dup(lib.bpf_map__fd(m)),
                _struct_desc(lib, btf, lib.bpf_map__btf_key_type_id(m)),
                _struct_desc(lib, btf, lib.bpf_map__btf_value_type_id(m)),
            )
        for p in _iterate(lib.bpf_object__next_program, obj):
            programs[lib.bpf_program__name(p).decode()] = os.dup(lib.bpf_program__fd(p))
    except BaseException:
        for fd in [*programs.values(), *(m.fd for m in maps.values())]:
            os.close(fd)
        raise
    finally:
        # The duplicated fds keep programs and maps alive; libbpf's memory goes now.
        lib.bpf_object__close(obj)
    ho = Handover(
        programs=programs,
        attachments=attachments,
        maps=maps,
        throttle_field=throttle_field(lib),
        uprobe_multi=bool(uprobe_multi),
    )
    try:
        for a in attach:
            attachments[a.key] = _attach(programs, a)
        for entry, exit_ in attach_pairs:
            try:
                exit_fd = _attach(programs, exit_)
            except LibbpfError:
                continue
            attachments[exit_.key] = exit_fd
            try:
                attachments[entry.key] = _attach(programs, entry)
            except LibbpfError:
                detach([attachments.pop(exit_.key)])
        for a in optional:
            try:
                attachments[a.key] = _attach(programs, a)
            except LibbpfError:
                continue
    except BaseException:
        ho.close()
        raise
    ho.compile_s = time.monotonic() - started
    return ho


def _configure(
    lib: Any, obj: Any, config: ctypes.Structure, max_entries: Mapping[str, int]
) -> None:
    """Resize the maps and write ``probe_config`` into .rodata, before load."""
    seen = set()
    rodata = None
    for m in _iterate(lib.bpf_object__next_map, obj):
        name = lib.bpf_map__name(m).decode()
        if lib.bpf_map__is_internal(m):
            if name.endswith(".rodata"):
                rodata = m
            continue
        if name in max_entries:
            err = lib.bpf_map__set_max_entries(m, max_entries[name])
            if err:
                raise _failure(f"cannot size map {name}", -err)
            seen.add(name)
    if set(max_entries) - seen:
        raise LibbpfError(f"the object has no map {sorted(set(max_entries) - seen)[0]}")
    if rodata is None:
        raise LibbpfError("the object has no .rodata (probe_config)")
    size = ctypes.c_size_t()
    ptr = lib.bpf_map__initial_value(rodata, ctypes.byref(size))
    if not ptr or size.value != ctypes.sizeof(config):
        raise LibbpfError(
            f"the object's probe_config is {size.value} bytes, gputop's is {ctypes.sizeof(config)}"
        )
    ctypes.memmove(ptr, ctypes.addressof(config), ctypes.sizeof(config))


def _attach(programs: Mapping[str, int], a: TracepointAttach) -> Attachment:
    fd = programs.get(a.program)
    if fd is None:
        raise LibbpfError(f"the object has no program {a.program}")
    try:
        # A tp_btf program names its tracepoint itself; a raw_tp one is told which.
        typed = prog_info(fd).type == _PROG_TYPE_TRACING
        name = None if typed else a.tracepoint.split(":", 1)[1]
        return Attachment(attach_raw_tracepoint(fd, name))
    except OSError as exc:
        raise LibbpfError(f"cannot attach {a.program} to {a.tracepoint}: {exc}") from None


class LibbpfLoader(ProbeLoader):
    """The CO-RE object at ``object_path``, loaded by libbpf and attached as raw tracepoints."""

    name: ClassVar[str] = "libbpf"
    slow: ClassVar[bool] = False

    def __init__(self, object_path: str) -> None:
        self.object_path = object_path

    def load(self, spec: LoadSpec) -> Handover:
        return load(
            Path(self.object_path),
            ProbeConfig(max_cpus=spec.max_cpus, arg2_reg=arg2_reg(platform.machine())),
            spec.max_entries,
            [TracepointAttach(f"tracepoint__sched__{e}", f"sched:{e}") for e in spec.sched_events],
            [
                (
                    TracepointAttach(f"on_{e}_entry", f"{c}:{e}_entry"),
                    TracepointAttach(f"on_{e}_exit", f"{c}:{e}_exit"),
                )
                for c, e in spec.irq_pairs
            ],
            uprobe_multi=spec.load_only if spec.uprobe_multi else (),
            optional=[TracepointAttach(prog, tp) for tp, prog in spec.optional],
        )

    def cancel(self) -> None:
        """Nothing to end: a load takes tens of milliseconds on the caller's thread."""
