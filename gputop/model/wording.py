"""Evidence wording: the sentences a verdict's evidence is made of, each with its numbers.

Measured numbers (the eBPF probe) are stated as such; where only /proc is there,
the sentence says what is inferred and why (``NOT_MEASURED``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gputop.model.fixes import Culprit
from gputop.model.frame import Preemptor
from gputop.model.job import WorkersSummary
from gputop.model.window import GpuAgg, HostAgg, ProcAgg

NOT_MEASURED = "inferred, not measured: the wait split needs the eBPF probe (gputop doctor)"


def pct(v: float | None) -> str:
    """A share as evidence quotes it: ``52%``, or ``n/a`` where not known."""
    return "n/a" if v is None else f"{v:.0f}%"


def gpu_wait_text(p: ProcAgg) -> str:
    """``waited for the GPU 62% (inside CUDA synchronization, spinning 40%; measured)``."""
    how = ""
    if p.gpu_sync_spin_pct and p.gpu_sync_spin_pct >= 1.0:
        how = f", spinning on a CPU {pct(p.gpu_sync_spin_pct)}"
    return f"waited for the GPU {pct(p.gpu_sync_pct)} (inside CUDA synchronization{how}; measured)"


def trainer_line(p: ProcAgg, secs: str, builds_own: bool = False) -> str:
    """Where the trainer's main thread spent the window: measured split, or /proc's.

    ``builds_own``: it has no DataLoader workers. It then waits for no batches (it
    makes them), so the line says so with its time on a CPU instead of a 0% wait.
    """
    if builds_own:
        return _builder_line(p, secs)
    if p.measured and p.gpu_measured:
        parts = [
            f"trainer pid {p.pid} {gpu_wait_text(p)} of the last {secs} s",
            f"waited for batches {pct(p.data_wait_pct)} and for a CPU {pct(p.cpu_wait_pct)}",
            f"worked on a CPU {pct(p.work_pct)}",
        ]
        if p.wait_collective_pct:
            parts.append(f"waited in collectives for other ranks {pct(p.wait_collective_pct)}")
        if p.wait_thread_pct:
            parts.append(f"woken by its own threads {pct(p.wait_thread_pct)}")
        return ", ".join(parts)
    if p.measured:
        parts = [
            f"trainer pid {p.pid} waited for batches {pct(p.data_wait_pct)} of the last {secs} s"
            f" and for a CPU {pct(p.cpu_wait_pct)}",
            f"on a CPU {pct(_oncpu(p))}",
            f"woken by interrupts (GPU, timers) {pct(p.wait_irq_pct)}",
            *_other_wakers(p),
        ]
        return ", ".join(parts)
    return (
        f"trainer pid {p.pid} off-CPU {pct(p.offcpu_pct)} of the last {secs} s:"
        f" {pct(p.runq_pct)} waiting for a CPU, {pct(p.blocked_pct)} asleep"
        f" (on its GPU or its batches: {NOT_MEASURED})"
    )


BUILDS_OWN = "builds its own batches (no DataLoader workers)"


def _builder_line(p: ProcAgg, secs: str) -> str:
    """A trainer with no workers: the share of its time on a CPU, where its batches are made."""
    head = f"trainer pid {p.pid} {BUILDS_OWN}: on a CPU"
    if p.measured and p.gpu_measured:
        return (
            f"{head} {pct(p.work_pct)} of the last {secs} s outside CUDA synchronization"
            f" (its batches and its other work), waited for a CPU {pct(p.cpu_wait_pct)},"
            f" {gpu_wait_text(p)}"
        )
    if p.measured:
        parts = [
            f"{head} {pct(_oncpu(p))} of the last {secs} s (its batches and its other work;"
            " a spinning wait for the GPU would count here too), waited for a CPU"
            f" {pct(p.cpu_wait_pct)}",
            f"woken by interrupts (GPU, timers) {pct(p.wait_irq_pct)}",
            *_other_wakers(p),
        ]
        return ", ".join(parts)
    return (
        f"{head} {pct(_oncpu(p))} of the last {secs} s, waiting for a CPU {pct(p.runq_pct)},"
        f" asleep {pct(p.blocked_pct)} (on its GPU or its storage: {NOT_MEASURED})"
    )


def _oncpu(p: ProcAgg) -> float | None:
    return None if p.offcpu_pct is None else 100.0 - p.offcpu_pct


def _other_wakers(p: ProcAgg) -> list[str]:
    parts = []
    if p.wait_collective_pct:
        parts.append(
            f"by its collective threads (waiting for other ranks) {pct(p.wait_collective_pct)}"
        )
    if p.wait_thread_pct:
        parts.append(f"by its own threads {pct(p.wait_thread_pct)}")
    if p.wait_other_pct:
        parts.append(f"by other processes {pct(p.wait_other_pct)}")
    return parts


def who_took(
    ps: Sequence[Preemptor] | None,
    culprits: Collection[int],
    job: Collection[int],
    gputop: Collection[int],
    limit_pct: float = 0.0,
) -> str:
    """Who took a wait for a CPU, adding up to all of it (measured), or "" unmeasured.

    ``pid 900 stress 61%, pid 901 stress 20%; the rest: the job itself 4%, kernel threads
    1%, gputop 1%, other processes 3%, its CPU limit 5%, charged to no recorded process 5%``:
    the job's culprits by name (each ``culprit_share_pct`` or more of the whole job's wait,
    never gputop) with their share of this wait, the rest by kind, so no part of a wait
    the evidence quotes is left unexplained. ``job``: the job's own processes (a process's
    own other threads are charged as itself); ``limit_pct``: the part of the wait its cgroup's
    CPU limit held it back (the CPU left idle: no process is charged for it).
    """
    if ps is None:
        return ""
    named = [p for p in ps if p.pid in culprits]
    kinds = {"the job itself": 0.0, "kernel threads": 0.0, "gputop": 0.0, "other processes": 0.0}
    for p in ps:
        if p.pid in culprits:
            continue
        kind = (
            "the job itself"
            if p.pid in job
            else "gputop"
            if p.pid in gputop
            else "kernel threads"
            if p.kernel
            else "other processes"
        )
        kinds[kind] += p.share_pct
    charged = sum(p.share_pct for p in ps)
    limit = min(max(0.0, limit_pct), max(0.0, 100.0 - charged))
    kinds["its CPU limit"] = limit
    kinds["charged to no recorded process"] = max(0.0, 100.0 - charged - limit)
    rest = [f"{kind} {whole(v)}%" for kind, v in kinds.items() if round(v) >= 1]
    text = ", ".join(f"pid {p.pid} {p.comm} {whole(p.share_pct)}%" for p in named)
    if rest:
        text += ("; the rest: " if text else "") + ", ".join(rest)
    return text


def limit_part(throttled_pct: float | None, runq_pct: float | None) -> float:
    """The share of a wait for a CPU a cgroup CPU limit held back (% of the wait)."""
    if not throttled_pct or not runq_pct:
        return 0.0
    return min(100.0, 100.0 * throttled_pct / runq_pct)


def workers_line(
    wk: WorkersSummary,
    culprits: Collection[int],
    job: Collection[int] = (),
    gputop: Collection[int] = (),
) -> str:
    """The DataLoader workers' CPU wait (and who took it: ``who_took``), preemption rate and
    CPU use."""
    each = wk.preempt_per_s / wk.count
    line = f"its {wk.count} DataLoader worker{'s' if wk.count != 1 else ''}"
    if wk.runq_pct is not None:
        line += f" waited for a CPU {pct(wk.runq_pct)} of the time"
        if round(wk.runq_pct) >= 1:
            took = who_took(
                wk.preemptors, culprits, job, gputop, limit_part(wk.throttled_pct, wk.runq_pct)
            )
            if took:
                line += f" (who took it: {took})"
        line += ","
    return line + f" were preempted {whole(each)}/s each and used {whole(wk.cpu_pct)}% CPU each"


STORAGE_SHOWN = 2  # filesystems named in the evidence (the most seen first)


def storage_line(wk: WorkersSummary, host: HostAgg) -> str:
    """The workers' I/O wait against their CPU use (measured), and the host's I/O pressure."""
    each = " each" if wk.count != 1 else ""
    line = (
        f"its DataLoader workers waited on storage: in I/O wait (uninterruptible sleep, mostly"
        f" disk reads) {pct(wk.io_wait_pct)} of the time{each}, on a CPU {whole(wk.cpu_pct)}%"
        " (measured)"
    )
    if wk.storage:
        shown = ", ".join(s.describe() for s in wk.storage[:STORAGE_SHOWN])
        more = len(wk.storage) - STORAGE_SHOWN
        line += f"; reading from {shown}" + (f" and {more} more" if more > 0 else "")
    if host.psi_io_some is not None:
        line += f"; I/O pressure {whole(host.psi_io_some)}%"
    return line


def plural(n: float, what: str) -> str:
    """``1 runnable task``, ``9 runnable tasks``: the count as evidence quotes it, and its noun."""
    count = whole(n)
    return f"{count} {what}{'' if count == '1' else 's'}"


def whole(v: float) -> str:
    """A number rounded to a whole, as evidence quotes it."""
    return f"{v:.0f}"


def gpu_line(gpu: GpuAgg, secs: str) -> str:
    """The GPU's numbers over the window: GPU_UTIL, SM activity, efficiency, power."""
    util = gpu.util or 0.0
    parts = [f"GPU {gpu.index}: GPU_UTIL {whole(util)}%"]
    if gpu.sm_active is not None:
        parts.append(f"SM activity {whole(gpu.sm_active)}%")
        if util > 0:
            parts.append(f"efficiency {min(1.0, gpu.sm_active / util):.2f}")
    else:
        parts.append("SM activity n/a")
    if gpu.power_w is not None and gpu.power_limit_w:
        parts.append(f"power {whole(gpu.power_w)} W of {whole(gpu.power_limit_w)} W")
    return ", ".join(parts) + f" over the last {secs} s"


def host_line(host: HostAgg) -> str:
    """How loaded the host's CPUs are: runnable tasks, busy share, load, CPU pressure."""
    line = (
        f"{plural(host.procs_running, 'runnable task')} on {host.ncpu} CPUs;"
        f" CPUs {whole(host.cpu_pct)}% busy; load {host.load1:.1f}"
    )
    if host.psi_cpu_some is not None:
        line += f"; CPU pressure {whole(host.psi_cpu_some)}%"
    return line


def others_line(others: Sequence[Culprit]) -> str:
    """/proc alone: the busiest processes outside the job (who preempted it is unknown)."""
    top = ", ".join(f"pid {p.pid} {p.comm} {whole(p.cpu_pct)}%" for p in others[:3])
    return f"busiest other processes (CPU use; who preempted the job is not measured): {top}"
