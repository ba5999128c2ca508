"""The probe's loaders behind one interface: each turns a ``LoadSpec`` into the same ``Handover``.

Two implementations, chosen by ``probe_plan.plan_loader()`` and made by
``probe_plan.make_loader()``:

- ``LibbpfLoader`` (``libbpf_loader``): the CO-RE object built ahead of time,
  loaded by libbpf and attached as raw tracepoints, in tens of milliseconds.
- ``BccLoader`` (``bcc_loader``): bcc compiles ``bpf/sched_probe.c`` at run time
  in a short-lived child that attaches it and hands the descriptors over; seconds.

Either way the result is a ``Handover``: programs, attachments and maps held only
by file descriptors of this process, which the probe reads with ``bpf(2)`` and
nothing else. A loader is used once: ``load()`` blocks until attached or raises
``LoadError``; ``cancel()``, from another thread, ends a load in flight so that
nothing stays attached. ``tests/system/test_loader_contract.py`` runs one suite
against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from gputop.sources.bpf_handover import Handover


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why the probe cannot run here, and the fix (None when there is no simple one)."""

    reason: str
    fix: str | None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What to load for this node.

    ``max_entries``: every map's bound, by name. ``irq_pairs``: the interrupt
    (category, event) pairs whose ``_entry``/``_exit`` tracepoints keep the
    interrupt depth (a pair the kernel refuses is skipped). ``load_only``:
    programs to load but leave unattached (the CUDA uprobes, attached later).
    ``optional``: (``category:event``, program) attached where this kernel has the
    tracepoint and skipped where it does not. ``nice``: the CPU priority of a compile (bcc).
    """

    max_entries: Mapping[str, int]
    max_cpus: int
    irq_pairs: Sequence[tuple[str, str]] = ()
    load_only: Sequence[str] = ()
    optional: Sequence[tuple[str, str]] = ()
    # The load_only programs are loaded for BPF_TRACE_UPROBE_MULTI (bpf_attach.
    # uprobe_multi_supported()): one link per library file and direction, no perf events.
    uprobe_multi: bool = False
    nice: int = 19
    # The scheduler tracepoints every load attaches (the sched:* events the program handles).
    sched_events: Sequence[str] = field(
        default=(
            "sched_switch",
            "sched_waking",
            "sched_wakeup",
            "sched_process_exit",
            "sched_process_exec",
        )
    )


class LoadError(Exception):
    """A load failed; ``reason`` says why in one line, ``fix`` how to fix it (or None).

    ``unavailable``: the loader itself is missing (nothing wrong with the program).
    """

    def __init__(self, reason: str, fix: str | None = None, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
        self.unavailable = unavailable


class ProbeLoader(ABC):
    """One way to load and attach the probe."""

    # "libbpf" or "bcc", as plan_loader() and GPUTOP_BPF_LOADER name them.
    name: ClassVar[str]
    # load() takes seconds (a compile): the probe runs it off the sampler's thread.
    slow: ClassVar[bool]

    @abstractmethod
    def load(self, spec: LoadSpec) -> Handover:
        """Load and attach; everything attached is a descriptor of the returned Handover."""

    @abstractmethod
    def cancel(self) -> None:
        """End a load in flight (from another thread); it then raises LoadError."""
