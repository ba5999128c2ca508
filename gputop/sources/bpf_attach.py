"""Attaching BPF programs to their hooks, with the raw system calls (ctypes).

Raw tracepoints by ``BPF_RAW_TRACEPOINT_OPEN``; trace events and uprobes by
``perf_event_open(2)`` with the program on the event through a BPF link; many uprobes
of one file by one ``BPF_TRACE_UPROBE_MULTI`` link where the kernel has them. Each
attachment is an ``Attachment`` of descriptors (``bpf_handover.detach`` lets go of
them); the maps are ``bpf_syscall``'s.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from gputop.sources.bpf_syscall import BpfError, _checked, _libc_handle, _syscall_nr, bpf

BPF_PROG_LOAD = 5
BPF_RAW_TRACEPOINT_OPEN = 17
BPF_LINK_CREATE = 28
_BPF_PERF_EVENT = 41  # enum bpf_attach_type: a BPF link onto a perf event (Linux 5.15+)
BPF_TRACE_UPROBE_MULTI = 48  # one link, many uprobes of one file (Linux 6.6+)
_BPF_F_UPROBE_MULTI_RETURN = 1
_BPF_PROG_TYPE_KPROBE = 2
_PERF_TYPE_TRACEPOINT = 2

# perf_event_open(2): how a uprobe program is attached (one perf event per probed address).
_SYS_PERF_EVENT_OPEN = {
    "x86_64": 298,
    "aarch64": 241,
    "riscv64": 241,
    "loongarch64": 241,
    "ppc64le": 319,
    "s390x": 331,
    "armv7l": 364,
    "i686": 336,
}
_PERF_FLAG_FD_CLOEXEC = 1 << 3
_PERF_EVENT_IOC_ENABLE = 0x2400  # _IO('$', 0)
_PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)


class _PerfEventAttr(ctypes.Structure):
    """The leading fields of ``struct perf_event_attr`` (PERF_ATTR_SIZE_VER1, 72 bytes)."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
    )


class _LinkCreateAttr(ctypes.Structure):
    _fields_ = (
        ("prog_fd", ctypes.c_uint32),
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("bpf_cookie", ctypes.c_uint64),
    )


class _UprobeMultiAttr(ctypes.Structure):
    _fields_ = (
        ("prog_fd", ctypes.c_uint32),
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("path", ctypes.c_uint64),
        ("offsets", ctypes.c_uint64),
        ("ref_ctr_offsets", ctypes.c_uint64),
        ("cookies", ctypes.c_uint64),
        ("cnt", ctypes.c_uint32),
        ("multi_flags", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
    )


class _ProgLoadAttr(ctypes.Structure):
    _fields_ = (
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
    )


class _RawTracepointAttr(ctypes.Structure):
    _fields_ = (
        ("name", ctypes.c_uint64),
        ("prog_fd", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("cookie", ctypes.c_uint64),
    )


def attach_raw_tracepoint(prog_fd: int, name: str | None = None) -> int:
    """Attach a raw tracepoint program to the tracepoint ``name`` (an event name, no
    category); None for a BTF-typed one (tp_btf), whose tracepoint was fixed at load.

    Returns the fd of the BPF link that holds the attachment. Closing it detaches
    the program at once: the kernel frees the probe after an RCU grace period
    instead of waiting for one, as closing a perf-event tracepoint does.
    """
    buf = ctypes.create_string_buffer(name.encode()) if name is not None else None
    attr = _RawTracepointAttr(ctypes.addressof(buf) if buf is not None else 0, prog_fd)
    return bpf(BPF_RAW_TRACEPOINT_OPEN, attr)


_UPROBE_PMU = "/sys/bus/event_source/devices/uprobe"


def uprobe_pmu() -> tuple[int, int] | None:
    """(the uprobe PMU's perf type, the config bit of its retprobe flag); None without uprobes."""
    try:
        with open(f"{_UPROBE_PMU}/type", encoding="ascii") as f:
            pmu = int(f.read().strip())
        with open(f"{_UPROBE_PMU}/format/retprobe", encoding="ascii") as f:
            bit = int(f.read().strip().split(":")[1])
    except (OSError, ValueError, IndexError):
        return None
    return pmu, bit


@dataclass(frozen=True, slots=True)
class Attachment:
    """What holds one program on one hook, as file descriptors of this process.

    ``link_fd``: a BPF link; closing it takes the program off the hook at once
    (a raw tracepoint's link returns at once; a perf event's link first waits
    for one RCU-tasks-trace grace period, some 25-40 ms here). ``event_fd``: the
    perf event (tracepoint, uprobe) the program is on; closing its last
    reference waits for the tracing grace periods (``bpf_handover.release``
    hands it to a child). A perf event without a link (kernels before 5.15)
    keeps running its program until that close.
    """

    link_fd: int | None
    event_fd: int | None = None


def attach_uprobe(prog_fd: int, path: str, offset: int, retprobe: bool) -> Attachment:
    """Attach a kprobe-type program at ``offset`` of the file ``path``, in every process.

    The kernel resolves ``path`` to its inode when the event is made: a path
    under ``/proc/PID/root`` reaches a library inside that process's container.
    """
    pmu = uprobe_pmu()
    if pmu is None:
        raise BpfError(errno.ENOENT, "this kernel has no uprobe PMU (CONFIG_UPROBES)")
    pmu_type, ret_bit = pmu
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = _PerfEventAttr(
        type=pmu_type,
        size=ctypes.sizeof(_PerfEventAttr),
        config=(1 << ret_bit) if retprobe else 0,
        config1=ctypes.addressof(name),
        config2=offset,
    )
    return _attach_perf_event(attr, prog_fd)


def attach_tracepoint(prog_fd: int, tracepoint_id: int) -> Attachment:
    """Attach a tracepoint-type program to trace event ``tracepoint_id`` (its tracefs ``id``)."""
    attr = _PerfEventAttr(
        type=_PERF_TYPE_TRACEPOINT, size=ctypes.sizeof(_PerfEventAttr), config=tracepoint_id
    )
    return _attach_perf_event(attr, prog_fd)


# None until the first perf event is attached: whether this kernel takes BPF links on perf events.
_perf_links: bool | None = None


def _attach_perf_event(attr: _PerfEventAttr, prog_fd: int) -> Attachment:
    """Open the perf event ``attr`` describes (every task, CPU 0: the program then runs on
    every CPU) and run the program on it, through a BPF link where the kernel has them.

    The link is what lets gputop stop the program at once when it lets go
    (``bpf_handover.detach``): a program set on the event itself
    (``PERF_EVENT_IOC_SET_BPF``) runs until the event is freed, and disabling
    the event does not stop it.
    """
    global _perf_links
    libc = _libc_handle()
    nr = _syscall_nr(_SYS_PERF_EVENT_OPEN, "perf_event_open(2)")
    fd = _checked(
        int(
            libc.syscall(
                ctypes.c_long(nr),
                ctypes.byref(attr),
                ctypes.c_int(-1),
                ctypes.c_int(0),
                ctypes.c_int(-1),
                ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC),
            )
        )
    )
    try:
        if _perf_links is not False:
            try:
                link = bpf(BPF_LINK_CREATE, _LinkCreateAttr(prog_fd, fd, _BPF_PERF_EVENT, 0, 0))
            except BpfError as exc:
                # EINVAL: a kernel that does not know the attach type; anything else is real.
                if _perf_links or exc.errno != errno.EINVAL:
                    raise
                _perf_links = False
            else:
                _perf_links = True
                return Attachment(link, fd)
        for request, arg in ((_PERF_EVENT_IOC_SET_BPF, prog_fd), (_PERF_EVENT_IOC_ENABLE, 0)):
            _checked(int(libc.ioctl(fd, ctypes.c_ulong(request), ctypes.c_int(arg))))
    except BpfError:
        os.close(fd)
        raise
    return Attachment(None, fd)


def attach_uprobe_multi(
    prog_fd: int, path: str, offsets: Sequence[int], retprobe: bool
) -> Attachment:
    """Attach a program loaded for ``BPF_TRACE_UPROBE_MULTI`` at every one of ``offsets`` of
    the file ``path``, in every process, with one BPF link and no perf event.

    One perf event per address would mean a close per address when gputop lets go, each
    waiting for a grace period while the kernel holds its trace-event lock (about 80 ms
    each here: 94 uprobes took 7.8 s to release, and every uprobe attached meanwhile, by
    anyone, waited up to one such close); this link lets go of them all at once.
    """
    name = ctypes.create_string_buffer(os.fsencode(path))
    offs = (ctypes.c_uint64 * len(offsets))(*offsets)
    attr = _UprobeMultiAttr(
        prog_fd=prog_fd,
        attach_type=BPF_TRACE_UPROBE_MULTI,
        path=ctypes.addressof(name),
        offsets=ctypes.addressof(offs),
        cnt=len(offsets),
        multi_flags=_BPF_F_UPROBE_MULTI_RETURN if retprobe else 0,
    )
    return Attachment(bpf(BPF_LINK_CREATE, attr))


# "r0 = 0; exit": the smallest program the kernel accepts.
_RETURN_ZERO = bytes.fromhex("b7000000000000009500000000000000")
_uprobe_multi: bool | None = None


def uprobe_multi_supported() -> bool:
    """Whether this kernel attaches uprobes by the file with one link (BPF_TRACE_UPROBE_MULTI).

    Asked of the kernel itself, as libbpf does: a program loaded for that attach type, and
    a link at an address of "/" (a directory), which only a kernel that knows the attach
    type refuses with EBADF. Cached for the process.
    """
    global _uprobe_multi
    if _uprobe_multi is not None:
        return _uprobe_multi
    insns = ctypes.create_string_buffer(_RETURN_ZERO, len(_RETURN_ZERO))
    licence = ctypes.create_string_buffer(b"GPL")
    try:
        prog = bpf(
            BPF_PROG_LOAD,
            _ProgLoadAttr(
                prog_type=_BPF_PROG_TYPE_KPROBE,
                insn_cnt=len(_RETURN_ZERO) // 8,
                insns=ctypes.addressof(insns),
                license=ctypes.addressof(licence),
                expected_attach_type=BPF_TRACE_UPROBE_MULTI,
            ),
        )
    except BpfError:
        _uprobe_multi = False
        return False
    try:
        os.close(attach_uprobe_multi(prog, "/", [0], False).link_fd or -1)
    except BpfError as exc:
        _uprobe_multi = exc.errno == errno.EBADF
    else:
        _uprobe_multi = False
    finally:
        os.close(prog)
    return _uprobe_multi
