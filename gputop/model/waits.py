"""Where a process's main thread spent the interval: the time split the screens draw.

Pure model code shared by the main screen's time bar and the drill-down's chart.
With the eBPF probe the blocked time is split by who woke the thread (its input
pipeline, an interrupt, another thread or process); under /proc alone only
on-CPU, waiting for a CPU and blocked are known, and the split says so.

Where the probe measures CUDA synchronization (the trainer's libcuda is probed),
time inside a synchronizing call is waiting for the GPU whatever the thread did
there (spun on a CPU, waited for one, slept), and is taken out of the other
parts. Waiting for batches is the blocked time ended by the input pipeline plus
the run-queue wait right after it (the batch had arrived; taking it needed a
CPU). Without the CUDA measurement, blocked time ended by an interrupt stands in
for the GPU part, inferred.

Time in uninterruptible sleep (``io_wait_pct``: a disk read, a mapped file's page) is
its own part, ``io``, where it is 0.5 % or more: taken out of the interrupt and other
wake-ups it was counted under (a disk's completion wakes the thread from an interrupt
or a kernel worker), never out of waiting for batches or for other ranks, whose wakers
are known. A rank's collective wait is likewise shown from 0.5 % on.

Time blocked until network receive processing woke it (``net_wait_pct``: data from a
remote peer, a socket read) is its own part, ``net``, where it is 0.5 % or more: the probe
tells it apart from interrupt wake-ups (the receive path runs as a softirq).

Where the probe measures host-to-device copies (``h2d_copy_pct``), time inside one is the
trainer copying its batch to the GPU (pageable memory staged by the driver on a CPU, or
waiting for its DMA), its own part, ``h2d``: its on-CPU and blocked time come out of
on-CPU work and the blocked parts; its run-queue time stays a wait for a CPU.

Where the job's cgroup has a CPU limit, the run-queue time its limit held the thread
back (``cpu_throttled_pct``, part of ``runq_pct``) is its own part, ``throttled``,
carved out of the run-queue time outside CUDA synchronization before anything else
is: a CPU was free for it, its limit said no.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import ProcessSample


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of the split: what the time was spent on, its share, and a short label."""

    key: str
    """``cpu``, ``runq``, ``throttled`` (where a CPU limit applies), ``input``, ``gpu``
    (measured) or ``irq`` (inferred), ``io`` (uninterruptible sleep: disk I/O),
    ``h2d`` (inside host-to-device copies, measured with the GPU wait), ``net`` (woken by
    network receive processing: a remote peer's data), ``collective`` (a
    distributed job's rank, woken by its collective-communication threads), ``other``, or
    (under /proc) ``blocked``."""
    label: str
    pct: float


LABELS = {
    "cpu": "on-CPU",
    "runq": "CPU wait",
    "throttled": "throttled by its CPU limit",
    "input": "waiting for batches",
    "h2d": "copying to the GPU",
    "gpu": "GPU wait",
    "irq": "GPU/irq wait (inferred)",
    "io": "disk I/O (uninterruptible)",
    "net": "network wait",
    "collective": "collective wait (other ranks)",
    "other": "other",
    "blocked": "blocked",
}
MEASURED_KEYS = ("cpu", "runq", "input", "irq", "other")
GPU_KEYS = ("cpu", "runq", "input", "gpu", "other")
PROC_KEYS = ("cpu", "runq", "blocked")
# A part that is not always there (disk I/O, a rank's collective wait) is shown from here on.
SHOWN_PCT = 0.5


@dataclass(frozen=True, slots=True)
class WaitSplit:
    """The main thread's interval split into segments that sum to ~100."""

    measured: bool
    """True when the blocked time is split by wake-up source (eBPF); False under /proc."""
    segments: tuple[Segment, ...]

    def pct(self, key: str) -> float | None:
        """The share of segment ``key``, or None when this split has no such segment."""
        for s in self.segments:
            if s.key == key:
                return s.pct
        return None


def _clamp(v: float) -> float:
    return max(0.0, min(100.0, v))


# The sample's fields split_of takes, in its order (the drill-down keeps each as a series).
SPLIT_FIELDS = (
    "offcpu_pct",
    "runq_pct",
    "wait_input_pct",
    "wait_irq_pct",
    "wait_thread_pct",
    "wait_other_pct",
    "runq_after_input_pct",
    "gpu_sync_pct",
    "gpu_sync_spin_pct",
    "gpu_sync_runq_pct",
    "cpu_throttled_pct",
    "wait_collective_pct",
    "io_wait_pct",
    "net_wait_pct",
    "h2d_copy_pct",
    "h2d_copy_cpu_pct",
    "h2d_copy_runq_pct",
)


def wait_split(p: ProcessSample) -> WaitSplit | None:
    """The split of ``p``'s main thread; None where its off-CPU share is unknown."""
    return split_of(*(getattr(p, f) for f in SPLIT_FIELDS))


def split_of(
    offcpu_pct: float | None,
    runq_pct: float | None,
    wait_input_pct: float | None,
    wait_irq_pct: float | None,
    wait_thread_pct: float | None,
    wait_other_pct: float | None,
    runq_after_input_pct: float | None = None,
    gpu_sync_pct: float | None = None,
    gpu_sync_spin_pct: float | None = None,
    gpu_sync_runq_pct: float | None = None,
    cpu_throttled_pct: float | None = None,
    wait_collective_pct: float | None = None,
    io_wait_pct: float | None = None,
    net_wait_pct: float | None = None,
    h2d_copy_pct: float | None = None,
    h2d_copy_cpu_pct: float | None = None,
    h2d_copy_runq_pct: float | None = None,
) -> WaitSplit | None:
    """The split from a process's numbers (a sample's, or one point of its series)."""
    if offcpu_pct is None:
        return None
    off = _clamp(offcpu_pct)
    runq = _clamp(min(off, runq_pct or 0.0))
    cpu = 100.0 - off
    if wait_input_pct is None:
        thr = _clamp(min(runq, cpu_throttled_pct or 0.0))
        parts = {"cpu": cpu, "runq": runq - thr, "throttled": thr, "blocked": max(0.0, off - runq)}
        return WaitSplit(False, _segments(parts, PROC_KEYS, cpu_throttled_pct is not None))
    blocked = max(0.0, off - runq)
    # Inside CUDA synchronization: on a CPU (spinning), runnable, and the rest blocked.
    sync = max(0.0, gpu_sync_pct or 0.0)
    spin = _clamp(min(cpu, gpu_sync_spin_pct or 0.0))
    sync_runq = _clamp(min(runq, gpu_sync_runq_pct or 0.0))
    sync_blocked = min(blocked, max(0.0, sync - spin - sync_runq))
    # Inside host-to-device copies: on a CPU and blocked (its run-queue part stays CPU wait).
    h2d_cpu = _clamp(min(cpu - spin, h2d_copy_cpu_pct or 0.0))
    h2d_blocked = min(
        blocked - sync_blocked,
        max(0.0, (h2d_copy_pct or 0.0) - (h2d_copy_cpu_pct or 0.0) - (h2d_copy_runq_pct or 0.0)),
    )
    copying = h2d_cpu + h2d_blocked >= SHOWN_PCT
    if not copying:
        h2d_cpu = h2d_blocked = 0.0
    thr = _clamp(min(runq - sync_runq, cpu_throttled_pct or 0.0))
    after_input = _clamp(min(runq - sync_runq - thr, runq_after_input_pct or 0.0))
    inp = max(0.0, wait_input_pct)
    irq = max(0.0, wait_irq_pct or 0.0)
    coll = max(0.0, wait_collective_pct or 0.0)
    net = max(0.0, net_wait_pct or 0.0)
    rest = max(0.0, (wait_thread_pct or 0.0) + (wait_other_pct or 0.0))
    # A stretch is reported under its waker when it ends, so one frame's classes can
    # hold earlier frames' blocked time: scale them into this frame's blocked share
    # (outside synchronization). Blocked time no waker is known for yet (still asleep
    # at the tick) counts as other.
    free = blocked - sync_blocked - h2d_blocked
    total = inp + irq + coll + net + rest
    scale = free / total if total > free else 1.0
    inp, irq, coll, net = inp * scale, irq * scale, coll * scale, net * scale
    other = max(0.0, free - inp - irq - coll - net)
    rank = coll >= SHOWN_PCT
    if not rank:
        other, coll = other + coll, 0.0
    remote = net >= SHOWN_PCT
    if not remote:
        other, net = other + net, 0.0
    if gpu_sync_pct is not None:
        # Interrupt wake-ups outside synchronization are not the GPU's: other.
        other, irq = other + irq, 0.0
    io = min(max(0.0, io_wait_pct or 0.0), irq + other)
    disk = io >= SHOWN_PCT
    if disk:
        from_irq = min(irq, io)
        irq, other = irq - from_irq, other - (io - from_irq)
    if gpu_sync_pct is None:
        parts = {
            "cpu": cpu,
            "runq": runq - thr - after_input,
            "throttled": thr,
            "input": inp + after_input,
            "irq": irq,
            "io": io,
            "net": net,
            "collective": coll,
            "other": other,
        }
        keys = MEASURED_KEYS
    else:
        parts = {
            "cpu": cpu - spin - h2d_cpu,
            "runq": runq - sync_runq - thr - after_input,
            "throttled": thr,
            "input": inp + after_input,
            "h2d": h2d_cpu + h2d_blocked,
            "gpu": spin + sync_runq + sync_blocked,
            "io": io,
            "net": net,
            "collective": coll,
            "other": other,
        }
        keys = GPU_KEYS
    return WaitSplit(
        True,
        _segments(parts, keys, cpu_throttled_pct is not None, rank, disk, remote, copying),
    )


def _segments(
    parts: dict[str, float],
    keys: tuple[str, ...],
    limited: bool,
    rank: bool = False,
    disk: bool = False,
    remote: bool = False,
    copying: bool = False,
) -> tuple[Segment, ...]:
    # The throttled part follows the run-queue part it was carved from, only under a limit;
    # disk I/O, the network, then a rank's collective wait, come before "other", only where
    # there is some.
    if limited:
        keys = (*keys[:2], "throttled", *keys[2:])
    if disk:
        keys = (*keys[:-1], "io", keys[-1])
    if remote:
        keys = (*keys[:-1], "net", keys[-1])
    if copying:
        at = keys.index("gpu")
        keys = (*keys[:at], "h2d", *keys[at:])
    if rank:
        keys = (*keys[:-1], "collective", keys[-1])
    return tuple(Segment(k, LABELS[k], parts[k]) for k in keys)
