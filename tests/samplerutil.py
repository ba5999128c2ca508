"""Sources for sampler tests: a GPU whose reads each test scripts (a value, a delay, a
failure), and a fake /proc with one DataLoader worker."""

from __future__ import annotations

import threading
import time

from gputop.model.frame import GpuReading, GpuSample, SourceStatus
from gputop.sampler import HostPass
from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree


class ScriptedGpu:
    """A GPU source whose behaviour each test scripts: a value, a delay, or a failure."""

    def __init__(self, fail_on_read: int | None = None, delay_s: float = 0.0) -> None:
        self.reads = 0
        self.fail_on_read = fail_on_read
        self.delay_s = delay_s
        self.closed = False
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    @property
    def status(self) -> SourceStatus:
        return SourceStatus("gpu", "scripted", True)

    def open(self) -> None:
        pass

    def read(self) -> GpuReading:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.reads += 1
            if self.reads == self.fail_on_read:
                raise RuntimeError("driver went away")
            time.sleep(self.delay_s)
            g = GpuSample(0, "GPU-x", "Scripted", 90.0, 10.0, 100.0, 400.0, 1, 2)
            return GpuReading(gpus=(g,))
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        self.closed = True


# Idle processes drop out of the table once rates exist; a DataLoader worker never does.
WORKER = "pt_data_worker"


def tiny_procs(tmp_path) -> HostPass:
    """A /proc pass over a fake /proc under ``tmp_path`` holding one DataLoader worker."""
    tree = FakeProcTree(tmp_path / "proc")
    tree.write(FakeProc(100, comm=WORKER))
    return HostPass(ProcSource(str(tree.root)))
