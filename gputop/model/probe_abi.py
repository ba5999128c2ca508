"""What the BPF program and gputop share, defined once: constants and the layouts of map values.

``bpf/probe_abi.h`` is generated from this module (``scripts/build_bpf.py``);
``scripts/build_bpf.py --check`` and the test suite fail when the header no
longer matches it. The C program includes the header; ``sources/sched_probe.py``
reads the maps through these ctypes structures, which are also checked against
the loaded program (sizes from the kernel, field names from BTF or bcc) before
the first read.

Pure ctypes: the wheel's build hook imports this file by path, without gputop's
dependencies.
"""

from __future__ import annotations

import ctypes
from typing import Any, ClassVar

# Who woke a blocked thread: the index into thread_t.wait_ns.
WAKE_NONE = 0  # no sched_waking seen for this stretch
WAKE_INPUT = 1  # its input pipeline: a worker or pin-memory thread of its trainer
WAKE_THREAD = 2  # another thread of its own process
WAKE_IRQ = 3  # interrupt context (timers, device interrupts, IPIs)
WAKE_OTHER = 4  # another process
WAKE_SYNC = 5  # blocked inside a CUDA synchronization call: waiting for the GPU, whoever woke it
WAKE_COLLECTIVE = 6  # a collective-communication thread of its own process (gloo): a collective
WAKE_NET = 7  # network receive processing (the NET_RX softirq) or a network socket's data-ready
WAKE_H2D = 8  # blocked inside a host-to-device copy (outside any CUDA synchronization)
WAKE_CLASSES = 9

# A pipeline value with this bit set names a collective-communication thread of the
# trainer in its low bits (tgids stay below 2^22), not a feeder of its input.
PIPE_COLLECTIVE = 0x80000000

HIST_SLOTS = 40  # log2 buckets of off-CPU stretches (ns): 2^39 ns is about 9 minutes
WAIT_SLOTS = 4  # watched threads that can wait in one CPU's run queue at a time

# Flags of the activity map: what a process did since user space last drained it.
ACT_RAN = 1  # one of its threads left a CPU (ran), or it exited
ACT_EXEC = 2  # it called exec: its name and command line changed

# Indices of the errors map: failed map updates the probe counts.
ERR_THREAD_MAP_FULL = 0
ERR_GROUP_MAP_FULL = 1
ERR_NOT_PREV = 2  # "current" was not sched_switch's prev (should never happen)
ERR_AUX_MAP_FULL = 3  # the preemptor or waker map
ERR_ACTIVITY_FULL = 4  # the activity map: user space must scan /proc whole
ERROR_SLOTS = 5
ERROR_NAMES = (
    "thread map full",
    "process map full",
    "current was not the outgoing task",
    "preemptor map full",
    "activity map full",
)

# Where a uprobe finds a function's second argument (a copy's source), by machine: the
# index of its register among struct pt_regs's u64 words (0: not known here).
ARG2_X86_64 = 13  # rsi
ARG2_AARCH64 = 1  # x1


def arg2_reg(machine: str) -> int:
    """The ``ARG2_*`` of this machine (``platform.machine()``); 0 where not known."""
    return {"x86_64": ARG2_X86_64, "amd64": ARG2_X86_64, "aarch64": ARG2_AARCH64}.get(
        machine.lower(), 0
    )


# Map bounds the object is built with; the loader resizes every map before loading.
DEFAULT_MAX_THREADS = 32768
DEFAULT_MAX_TGIDS = 8192
DEFAULT_MAX_PIPELINE = 4096
DEFAULT_MAX_PREEMPT = 8192
DEFAULT_MAX_CPUS = 64

# Plain integer constants written to the header as #defines, in this order.
CONSTANTS = (
    "WAKE_NONE",
    "WAKE_INPUT",
    "WAKE_THREAD",
    "WAKE_IRQ",
    "WAKE_OTHER",
    "WAKE_SYNC",
    "WAKE_COLLECTIVE",
    "WAKE_NET",
    "WAKE_H2D",
    "WAKE_CLASSES",
    "PIPE_COLLECTIVE",
    "HIST_SLOTS",
    "WAIT_SLOTS",
    "ACT_RAN",
    "ACT_EXEC",
    "ERR_THREAD_MAP_FULL",
    "ERR_GROUP_MAP_FULL",
    "ERR_NOT_PREV",
    "ERR_AUX_MAP_FULL",
    "ERR_ACTIVITY_FULL",
    "ERROR_SLOTS",
    "ARG2_X86_64",
    "ARG2_AARCH64",
    "DEFAULT_MAX_THREADS",
    "DEFAULT_MAX_TGIDS",
    "DEFAULT_MAX_PIPELINE",
    "DEFAULT_MAX_PREEMPT",
    "DEFAULT_MAX_CPUS",
)


class AbiStruct(ctypes.Structure):
    """A struct shared with the BPF program; ``_c_name_`` and per-field ``_notes_`` go to C."""

    _c_name_ = ""
    _notes_: ClassVar[dict[str, str]] = {}


class ThreadT(AbiStruct):
    """``struct thread_t``: one thread's running totals, keyed by tid.

    Written only around that thread's own switches, which the scheduler
    serialises, so plain stores are enough.
    """

    _c_name_ = "thread_t"
    _fields_ = (
        ("out_ts", ctypes.c_uint64),
        ("wake_ts", ctypes.c_uint64),
        ("in_ts", ctypes.c_uint64),
        ("runq_ns", ctypes.c_uint64),
        ("blocked_ns", ctypes.c_uint64),
        ("oncpu_ns", ctypes.c_uint64),
        ("nivcsw", ctypes.c_uint64),
        ("nvcsw", ctypes.c_uint64),
        ("missed", ctypes.c_uint64),
        ("longest_ns", ctypes.c_uint64 * 2),
        ("longest_ep", ctypes.c_uint32 * 2),
        ("tgid", ctypes.c_uint32),
        ("runnable", ctypes.c_uint32),
        ("wait_ns", ctypes.c_uint64 * WAKE_CLASSES),
        ("sync_since", ctypes.c_uint64),
        ("sync_ns", ctypes.c_uint64),
        ("sync_oncpu_ns", ctypes.c_uint64),
        ("sync_runq_ns", ctypes.c_uint64),
        ("runq_after_input_ns", ctypes.c_uint64),
        ("throttled_ns", ctypes.c_uint64),
        ("io_wait_ns", ctypes.c_uint64),
        ("h2d_since", ctypes.c_uint64),
        ("h2d_ns", ctypes.c_uint64),
        ("h2d_oncpu_ns", ctypes.c_uint64),
        ("h2d_runq_ns", ctypes.c_uint64),
        ("wake_class", ctypes.c_uint32),
        ("wait_slot", ctypes.c_uint32),
        ("waker_tgid", ctypes.c_uint32),
        ("sync_depth", ctypes.c_uint32),
        ("active_ep", ctypes.c_uint32),
        ("throttled", ctypes.c_uint32),
        ("io_wait", ctypes.c_uint32),
        ("h2d_depth", ctypes.c_uint32),
        ("copy_h2d", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )
    _notes_: ClassVar[dict[str, str]] = {
        "out_ts": "when it last left a CPU; 0 while on a CPU or unknown",
        "wake_ts": "when it was woken after leaving blocked; 0 if not (yet)",
        "in_ts": "when it last got a CPU; 0 while off or unknown",
        "runq_ns": "runnable, waiting for a CPU: preempted, or woken and not yet run",
        "blocked_ns": "blocked: from a blocking switch-out to its wakeup",
        "nivcsw": "switched out runnable (preempted, yielded)",
        "nvcsw": "switched out blocked",
        "missed": "switches the probe did not see (detected afterwards)",
        "longest_ns": "longest stretch ended in epoch longest_ep[i]",
        "runnable": "state at the last switch-out",
        "wait_ns": "blocked time by who ended it (WAKE_*); [WAKE_NONE]: no sched_waking seen",
        "wake_class": "class of the waking that ended the current blocked stretch",
        "wait_slot": "a watched thread waiting for a CPU: its slot in cpu_waiters + 1",
        "waker_tgid": "WAKE_OTHER of a watched thread: the waking process",
        "sync_since": "when the outermost CUDA synchronization call in progress began",
        "sync_ns": "time inside CUDA synchronization calls that have returned",
        "sync_oncpu_ns": "of which on a CPU (spinning)",
        "sync_runq_ns": "of which runnable, waiting for a CPU (blocked: wait_ns[WAKE_SYNC])",
        "runq_after_input_ns": "run-queue wait right after a wake-up by the input pipeline",
        "throttled_ns": "of runq_ns: held back by its cgroup's CPU limit (CO-RE build only)",
        "throttled": "the last runnable switch-out was its cgroup's CPU limit (SWITCH_THROTTLED)",
        "io_wait_ns": "of blocked_ns: in uninterruptible sleep (D), up to its wakeup",
        "io_wait": "the last blocked switch-out was in uninterruptible sleep (SWITCH_IO_WAIT)",
        "sync_depth": "CUDA synchronization calls in progress (nested calls count once)",
        "active_ep": "epoch + 1 in which its process was last marked in the activity map",
        "h2d_since": "when the outermost host-to-device copy in progress began",
        "h2d_ns": "time inside host-to-device copies that have returned",
        "h2d_oncpu_ns": "of which on a CPU (the driver staging pageable memory, or spinning)",
        "h2d_runq_ns": "of which runnable, waiting for a CPU (blocked: wait_ns[WAKE_H2D])",
        "h2d_depth": "host-to-device copies in progress (nested calls count once)",
        "copy_h2d": "the generic copy in progress (cuMemcpy, cuMemcpyAsync) reads host memory",
    }


class GroupT(AbiStruct):
    """``struct group_t``: one thread group's totals and histogram, keyed by tgid.

    Threads of a group switch on several CPUs at once, so its counters take
    atomic adds.
    """

    _c_name_ = "group_t"
    _fields_ = (
        ("dead_runq_ns", ctypes.c_uint64),
        ("dead_throttled_ns", ctypes.c_uint64),
        ("dead_blocked_ns", ctypes.c_uint64),
        ("dead_io_wait_ns", ctypes.c_uint64),
        ("dead_oncpu_ns", ctypes.c_uint64),
        ("dead_nivcsw", ctypes.c_uint64),
        ("dead_nvcsw", ctypes.c_uint64),
        ("dead_missed", ctypes.c_uint64),
        ("longest_ns", ctypes.c_uint64 * 2),
        ("longest_ep", ctypes.c_uint32 * 2),
        ("hist", ctypes.c_uint64 * HIST_SLOTS),
    )
    _notes_: ClassVar[dict[str, str]] = {
        "dead_runq_ns": "totals folded in from threads that have exited",
        "hist": "off-CPU stretches by floor(log2(ns))",
    }


class PreemptKeyT(AbiStruct):
    """``struct preempt_key_t``: a watched process and one that ran while it waited."""

    _c_name_ = "preempt_key_t"
    _fields_ = (("victim", ctypes.c_uint32), ("by", ctypes.c_uint32))
    _notes_: ClassVar[dict[str, str]] = {"victim": "tgid", "by": "tgid (a kernel thread's pid)"}


class PreemptValT(AbiStruct):
    """``struct preempt_val_t``: run-queue time lost to one preemptor, and how often."""

    _c_name_ = "preempt_val_t"
    _fields_ = (("ns", ctypes.c_uint64), ("count", ctypes.c_uint64))


class WokeKeyT(AbiStruct):
    """``struct woke_key_t``: a watched thread and the process that woke it."""

    _c_name_ = "woke_key_t"
    _fields_ = (("tid", ctypes.c_uint32), ("waker", ctypes.c_uint32))
    _notes_: ClassVar[dict[str, str]] = {"tid": "the wakee", "waker": "tgid"}


class WokeValT(AbiStruct):
    """``struct woke_val_t``: blocked time ended by that waker."""

    _c_name_ = "woke_val_t"
    _fields_ = (("ns", ctypes.c_uint64), ("tgid", ctypes.c_uint32), ("pad", ctypes.c_uint32))
    _notes_: ClassVar[dict[str, str]] = {"tgid": "the wakee's"}


class WaitersT(AbiStruct):
    """``struct waiters_t``: the watched threads waiting in one CPU's run queue."""

    _c_name_ = "waiters_t"
    _fields_ = (
        ("tid", ctypes.c_uint32 * WAIT_SLOTS),
        ("tgid", ctypes.c_uint32 * WAIT_SLOTS),
        ("since", ctypes.c_uint64 * WAIT_SLOTS),
    )


class IrqDepthT(AbiStruct):
    """``struct irq_depth_t``: one CPU's interrupt nesting depth and what network receive
    processing it is in, on its own cache line."""

    _c_name_ = "irq_depth_t"
    _fields_ = (
        ("depth", ctypes.c_uint32),
        ("net_rx_at", ctypes.c_uint32),
        ("ready_tid", ctypes.c_uint32),
        ("ready_depth", ctypes.c_uint32),
        ("ready_ts", ctypes.c_uint64),
        ("pad", ctypes.c_uint32 * 10),
    )
    _notes_: ClassVar[dict[str, str]] = {
        "net_rx_at": "the depth at which the NET_RX softirq runs on this CPU; 0: not in it",
        "ready_tid": "who last signalled a network socket's data-ready here (sock:sk_data_ready)",
        "ready_depth": "at which interrupt depth",
        "ready_ts": "and when",
    }


class ProbeConfig(AbiStruct):
    """``struct probe_config``: what differs per node, set by the loader before the program loads.

    In the ahead-of-time object it is a ``const volatile`` global (.rodata), so
    the verifier sees the values as constants; bcc gets the same values as -D
    flags.
    """

    _c_name_ = "probe_config"
    _fields_ = (
        ("max_cpus", ctypes.c_uint32),
        ("arg2_reg", ctypes.c_uint32),
    )
    _notes_: ClassVar[dict[str, str]] = {
        "max_cpus": "bound of the per-CPU slots (possible CPUs)",
        "arg2_reg": "a function's second argument: its u64 index in pt_regs (ARG2_*; 0: unknown)",
    }


# Every map of the program: name -> (key type, value type), None for a map only the
# kernel side uses. gputop checks each against the loaded program's own description.
MAP_TYPES: dict[str, tuple[Any, Any] | None] = {
    "threads": (ctypes.c_uint32, ThreadT),
    "groups": (ctypes.c_uint32, GroupT),
    "exiting": None,
    "epoch": (ctypes.c_int32, ctypes.c_uint32),
    "errors": (ctypes.c_int32, ctypes.c_uint64),
    "pipeline": (ctypes.c_uint32, ctypes.c_uint32),
    "watched": (ctypes.c_uint32, ctypes.c_uint8),
    "preempt": (PreemptKeyT, PreemptValT),
    "activity": (ctypes.c_uint32, ctypes.c_uint8),
    "running": (ctypes.c_int32, ctypes.c_uint32),
    "other_wakers": (WokeKeyT, WokeValT),
    "cpu_waiters": (ctypes.c_int32, WaitersT),
    "irq_depth": (ctypes.c_int32, IrqDepthT),
    "blank_group": None,
}

STRUCTS: tuple[type[AbiStruct], ...] = (
    ThreadT,
    GroupT,
    PreemptKeyT,
    PreemptValT,
    WokeKeyT,
    WokeValT,
    WaitersT,
    IrqDepthT,
    ProbeConfig,
)

_C_SCALARS: dict[Any, str] = {
    ctypes.c_uint8: "u8",
    ctypes.c_uint32: "u32",
    ctypes.c_uint64: "u64",
    ctypes.c_int32: "s32",
    ctypes.c_int64: "s64",
}


def _c_field(name: str, ctype: Any) -> str:
    if hasattr(ctype, "_length_"):
        return f"{_C_SCALARS[ctype._type_]} {name}[{ctype._length_}];"
    return f"{_C_SCALARS[ctype]} {name};"


def c_header() -> str:
    """The text of ``bpf/probe_abi.h``."""
    out = [
        "// Generated from gputop/model/probe_abi.py by scripts/build_bpf.py: do not edit.",
        "// What the BPF program and gputop share: constants and the layouts of map values.",
        "#ifndef GPUTOP_PROBE_ABI_H",
        "#define GPUTOP_PROBE_ABI_H",
        "",
    ]
    g = globals()
    out += [f"#define {name} {g[name]}" for name in CONSTANTS]
    for s in STRUCTS:
        out += ["", f"struct {s._c_name_} {{"]
        for field in s._fields_:
            name, ctype = field[0], field[1]
            line = "    " + _c_field(name, ctype)
            note = s._notes_.get(name)
            out.append(f"{line}  // {note}" if note else line)
        out.append("};")
    out += ["", "#endif", ""]
    return "\n".join(out)
