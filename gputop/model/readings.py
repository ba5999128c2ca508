"""What the scheduler probe read in one interval: plain values, the model's input.

The probe (``sources/sched_probe.py``) reads its kernel maps; the pure accounting
(``model/sched_intervals.py``) turns those rows into these deltas; the join stage
puts them into each process's row.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TaskSched:
    """Scheduler deltas for one thread or one thread group over one probe interval."""

    runq_ns: int = 0
    blocked_ns: int = 0
    oncpu_ns: int = 0
    nivcsw: int = 0
    nvcsw: int = 0
    longest_offcpu_ns: int = 0
    hist: tuple[int, ...] | None = None
    # Context switches the probe detected it had not been shown (their time is partly lost).
    missed_switches: int = 0
    # Blocked time split by who woke the thread (per thread only; 0 for a thread group).
    wait_input_ns: int = 0
    wait_thread_ns: int = 0
    wait_irq_ns: int = 0
    wait_other_ns: int = 0
    # Blocked and not (yet) known who woke it: still asleep at the read, or its
    # waking was not seen. Time reported here is not reported again when the
    # waker becomes known.
    wait_pending_ns: int = 0
    # Of wait_other_ns, for a watched thread: (waking process's tgid, ns), so the
    # caller can count a worker that the probe did not know yet as input.
    other_wakers: tuple[tuple[int, int], ...] = ()
    # Running totals (since the probe first saw the thread) of blocked time whose
    # waker is known: (input, thread, irq, other) ns. Differences between two
    # reads give a window's split exactly, pending stretches included once woken.
    wait_totals_ns: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class PreemptorTime:
    """Run-queue time a watched process lost to preemptions by one other process."""

    pid: int
    """The preempting process (its tgid; a kernel thread's pid)."""
    ns: int
    count: int


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What the scheduler probe saw since its previous read."""

    dt_ns: int
    per_tgid: dict[int, TaskSched]
    per_tid: dict[int, TaskSched]
    map_errors: int = 0
    # Watched process (tgid) -> who preempted it in the interval, most time first;
    # () when watched for the whole interval and never preempted. Processes not
    # watched for the whole interval are absent.
    preemptors: dict[int, tuple[PreemptorTime, ...]] = field(default_factory=dict)
