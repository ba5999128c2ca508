"""The demo trainer's progress counters, shared with gputop through one memory page.

The trainer is the only writer; gputop reads. A sequence counter (odd while a
write is in progress) lets the reader retry instead of seeing a torn update.
All times are CLOCK_MONOTONIC nanoseconds, which both processes share.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

_FIELDS = (
    "seq",
    "ready",
    "trainer_pid",
    "steps",
    "busy_done_ns",
    "step_t0_ns",
    "sched_compute_ns",
    "gpu_free_at_ns",
    "data_wait_ns",
)
_FMT = "<" + "q" * len(_FIELDS)
SIZE = mmap.PAGESIZE


@dataclass(frozen=True, slots=True)
class Progress:
    """One consistent reading of the counters."""

    ready: int = 0
    trainer_pid: int = 0
    steps: int = 0
    busy_done_ns: int = 0
    """Kernel-queued time of finished steps (first launch until the trainer saw the end)."""
    step_t0_ns: int = 0
    """When the running step queued its first kernel; 0 between steps."""
    sched_compute_ns: int = 0
    """Compute time of every kernel launched so far (finished or queued)."""
    gpu_free_at_ns: int = 0
    """When the last launched kernel finishes."""
    data_wait_ns: int = 0
    """Time the trainer waited for its DataLoader."""

    def busy_ns(self, now_ns: int) -> int:
        """Kernel-queued time up to ``now_ns``."""
        if not self.step_t0_ns:
            return self.busy_done_ns
        return self.busy_done_ns + max(0, now_ns - self.step_t0_ns)

    def compute_ns(self, now_ns: int) -> int:
        """Kernel compute time done by ``now_ns``.

        Every queued kernel was launched before now, so what is still queued runs
        back to back until ``gpu_free_at_ns``: the work left is exactly that span.
        """
        return self.sched_compute_ns - max(0, self.gpu_free_at_ns - now_ns)


class ProgressPage:
    """The shared page: ``write`` on the trainer's side, ``read`` on gputop's.

    ``rank``: which page of the file (one per rank of the straggler demo's job)."""

    def __init__(self, fd: int, rank: int = 0) -> None:
        self._mm = mmap.mmap(fd, SIZE, offset=rank * SIZE)
        self._seq = 0

    def write(self, p: Progress) -> None:
        """Publish new counters (single writer)."""
        self._seq += 1
        struct.pack_into("<q", self._mm, 0, self._seq)
        values = [getattr(p, name) for name in _FIELDS[1:]]
        struct.pack_into(_FMT, self._mm, 0, self._seq, *values)
        self._seq += 1
        struct.pack_into("<q", self._mm, 0, self._seq)

    def read(self) -> Progress:
        """A consistent copy of the counters (a writer killed mid-update cannot hang it)."""
        values: tuple[int, ...] = ()
        for _ in range(10000):
            values = struct.unpack_from(_FMT, self._mm, 0)
            if values[0] % 2 == 0 and struct.unpack_from("<q", self._mm, 0)[0] == values[0]:
                break
        return Progress(*values[1:])

    def close(self) -> None:
        """Unmap the page; safe to call twice."""
        if not self._mm.closed:
            self._mm.close()
