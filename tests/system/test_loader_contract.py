"""One contract, both loaders (libbpf's object built ahead of time, bcc's compile in a child),
as root with the real program: each turns a LoadSpec into the same fd-only Handover.

Each loader runs where this node has what it needs (``plan_loader`` forced to it); the
other is skipped with the reason. Programs are told apart from other probes on this
machine by the ids this process holds, never by name alone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gputop.model.probe_abi import MAP_TYPES
from gputop.sources.bcc_loader import BccLoader
from gputop.sources.bpf_syscall import map_info
from gputop.sources.cuda_probe import UPROBE_PROGRAMS
from gputop.sources.libbpf_loader import LibbpfLoader
from gputop.sources.probe_loader import LoadError, LoadSpec, ProbeLoader, Unavailable
from gputop.sources.probe_plan import (
    bpf_object_path,
    bpf_source_path,
    irq_pairs,
    plan_loader,
    possible_cpus,
    privileges_problem,
)
from tests.bpfutil import held_perf_attachments, held_prog_ids, wait_gone
from tests.procutil import spawn_python

EVENTS = (
    "sched_switch",
    "sched_waking",
    "sched_wakeup",
    "sched_process_exit",
    "sched_process_exec",
)
SCHED_PROGRAMS = {f"tracepoint__sched__{e}" for e in EVENTS}


def _loader_for(name: str) -> Callable[[str | None], ProbeLoader]:
    """A factory: the loader ``name`` with this installation's program, or with ``path``."""
    if name == "libbpf":
        return lambda path: LibbpfLoader(path or bpf_object_path())
    return lambda path: BccLoader(path or bpf_source_path())


@pytest.fixture(params=["libbpf", "bcc"])
def make(request: pytest.FixtureRequest) -> Callable[[str | None], ProbeLoader]:
    why = privileges_problem()
    if why is not None:
        pytest.skip(why.reason)
    plan = plan_loader(request.param)
    if isinstance(plan, Unavailable):
        pytest.skip(f"{request.param} cannot load here: {plan.reason}")
    return _loader_for(request.param)


def _spec() -> LoadSpec:
    cpus = possible_cpus()
    bounds = {"threads": 2048, "groups": 512, "pipeline": 64, "preempt": 256}
    return LoadSpec(
        max_entries={
            "threads": bounds["threads"],
            "exiting": bounds["threads"],
            "groups": bounds["groups"],
            "activity": bounds["groups"],
            "pipeline": bounds["pipeline"],
            "watched": bounds["pipeline"],
            "preempt": bounds["preempt"],
            "other_wakers": bounds["preempt"],
            "cpu_waiters": cpus,
            "irq_depth": cpus,
            "running": cpus,
        },
        max_cpus=cpus,
        irq_pairs=[*irq_pairs(), ("no_such_category", "no_such_event")],
        load_only=UPROBE_PROGRAMS,
        nice=0,
    )


def test_a_load_attaches_every_scheduler_event_and_hands_over_fds_only(make) -> None:
    loader = make(None)
    before = held_prog_ids(os.getpid())
    ho = loader.load(_spec())
    try:
        assert SCHED_PROGRAMS | set(UPROBE_PROGRAMS) <= set(ho.programs)
        attached = {a.partition(":")[2] for a in ho.attachments}
        assert {f"sched:{e}" for e in EVENTS} <= attached
        # The uprobe programs are loaded, not attached: the probe attaches them per libcuda.
        mine = held_perf_attachments(os.getpid())
        assert {a["prog_id"] for a in mine} >= set(ho.program_ids()[p] for p in SCHED_PROGRAMS)
        uprobe_ids = {ho.program_ids()[p] for p in UPROBE_PROGRAMS}
        assert not uprobe_ids & {a["prog_id"] for a in mine}
        # Every map gputop knows, checked against the program's own description.
        maps = ho.open_maps(MAP_TYPES)
        spawn_python("import time; time.sleep(0.05)").wait()
        assert maps["threads"].items(), "sched_switch ran and created thread entries"
    finally:
        ho.close()
    assert held_prog_ids(os.getpid()) == before


def test_maps_are_sized_as_the_spec_asks(make) -> None:
    spec = _spec()
    ho = make(None).load(spec)
    try:
        sizes = {name: int(map_info(m.fd).max_entries) for name, m in ho.maps.items()}
    finally:
        ho.close()
    assert {k: sizes[k] for k in spec.max_entries} == dict(spec.max_entries)


def test_interrupt_tracepoints_come_in_pairs_and_a_missing_pair_is_skipped(make) -> None:
    before = {a["fd"] for a in held_perf_attachments(os.getpid())}
    ho = make(None).load(_spec())
    try:
        events = {a.partition(":")[2] for a in ho.attachments}
        mine = [a for a in held_perf_attachments(os.getpid()) if a["fd"] not in before]
    finally:
        ho.close()
    # Each interrupt tracepoint runs a program of its own: the kernel skips a raw
    # tracepoint's program while that same program runs on the CPU, so a shared exit
    # program interrupted by a hard interrupt would lose that interrupt's exit.
    irq_progs = [a["prog_id"] for a in mine if not str(a.get("tracepoint", "")).startswith("sched")]
    assert irq_progs and len(set(irq_progs)) == len(irq_progs), mine
    irq = {e for e in events if not e.startswith("sched:")}
    entries = {e.removesuffix("_entry") for e in irq if e.endswith("_entry")}
    exits = {e.removesuffix("_exit") for e in irq if e.endswith("_exit")}
    assert entries == exits
    assert "irq:irq_handler" in entries and "irq:softirq" in entries
    assert not any(e.startswith("no_such_category") for e in events)


def test_an_optional_tracepoint_attaches_where_the_kernel_has_it_and_is_skipped_where_not(
    make,
) -> None:
    spec = _spec()
    optional = [("sock:sk_data_ready", "on_sk_data_ready"), ("no_such:event", "on_sk_data_ready")]
    ho = make(None).load(LoadSpec(**{**_fields(spec), "optional": optional}))
    try:
        events = {a.partition(":")[2] for a in ho.attachments}
    finally:
        ho.close()
    assert "no_such:event" not in events
    has = os.path.isdir("/sys/kernel/tracing/events/sock/sk_data_ready") or os.path.isdir(
        "/sys/kernel/debug/tracing/events/sock/sk_data_ready"
    )
    assert ("sock:sk_data_ready" in events) == has, events


def _fields(spec: LoadSpec) -> dict[str, object]:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def test_closing_leaves_nothing_attached_or_loaded(make) -> None:
    ho = make(None).load(_spec())
    ids = set(ho.program_ids().values())
    ho.close()
    assert not ids & held_prog_ids(os.getpid())
    assert not ids & {a["prog_id"] for a in held_perf_attachments(os.getpid())}
    assert wait_gone(ids) == set(), "the kernel frees the programs once nobody holds them"


def test_a_program_that_cannot_load_raises_load_error_with_one_line(make, tmp_path: Path) -> None:
    bad = tmp_path / "broken"
    bad.write_text("this is neither C nor an ELF object {\n")
    before = held_prog_ids(os.getpid())
    with pytest.raises(LoadError) as err:
        make(str(bad)).load(_spec())
    assert err.value.reason and "\n" not in err.value.reason
    assert held_prog_ids(os.getpid()) == before


def test_a_load_cancelled_in_flight_raises_and_leaves_nothing(make) -> None:
    loader = make(None)
    if not loader.slow:
        pytest.skip(
            f"{loader.name} loads on the caller's thread in milliseconds: nothing to cancel"
        )
    before = held_prog_ids(os.getpid())
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(loader.load(_spec()))
        except LoadError as exc:
            outcome.append(exc)

    t = threading.Thread(target=run)
    t.start()
    loader.cancel()
    t.join(60)
    assert not t.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], LoadError), outcome
    assert held_prog_ids(os.getpid()) == before
