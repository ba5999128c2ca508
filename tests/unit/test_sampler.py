"""The sampler one tick at a time on a fake /proc: sources that fail are disabled, never the
sampler; the interval's floor; history series on one time axis."""

from __future__ import annotations

from gputop.model.frame import SourceStatus
from gputop.model.history import History
from gputop.model.readings import Pipeline
from gputop.sampler import HostPass, Sampler
from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree
from tests.samplerutil import WORKER, ScriptedGpu, tiny_procs


def test_failing_gpu_source_is_disabled_with_reason_and_sampling_goes_on(tmp_path):
    gpu = ScriptedGpu(fail_on_read=2)
    s = Sampler(gpu=gpu, procs=tiny_procs(tmp_path))
    f1 = s.tick()
    assert f1.sources.gpu == "scripted" and len(f1.gpus) == 1
    f2 = s.tick()
    assert f2.gpus == ()
    assert f2.sources.gpu == "none"
    assert any("driver went away" in n for n in f2.sources.notes)
    assert gpu.closed
    f3 = s.tick()
    assert f3.seq == 3 and [p.pid for p in f3.processes] == [100]


class ExplodingProbe:
    status = SourceStatus("sched", "bpf", False, "compiling")

    def open(self) -> None:
        pass

    def prepare(self, pipeline) -> None:
        pass

    def read(self, pipeline=None):
        raise OSError("map vanished")

    def close(self) -> None:
        pass


def test_failing_probe_falls_back_to_procfs(tmp_path):
    s = Sampler(procs=tiny_procs(tmp_path), probe=ExplodingProbe())
    f = s.tick()
    assert s.probe is None
    assert f.sources.sched == "procfs"
    assert any("map vanished" in n for n in f.sources.notes)


class RecordingProbe:
    """A probe not attached yet, writing down what the sampler asks of it, in order."""

    status = SourceStatus("sched", "bpf", False, "compiling")

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def open(self) -> None:
        pass

    def prepare(self, pipeline) -> None:
        self.calls.append(("prepare", pipeline))

    def read(self, pipeline=None):
        self.calls.append(("read", pipeline))

    def close(self) -> None:
        pass


def test_the_probe_watches_a_ticks_pipeline_from_the_end_of_that_tick(tmp_path):
    # What a tick's join found is handed to the probe before the next tick reads it, so a
    # trainer found now is watched through the whole next interval; the read is not handed
    # it again, or the probe would write the same pipeline twice per tick.
    probe = RecordingProbe()
    s = Sampler(procs=tiny_procs(tmp_path), probe=probe)
    s.tick()
    s.tick()
    kinds = [k for k, _ in probe.calls]
    assert kinds == ["read", "prepare", "read", "prepare"], kinds
    assert probe.calls[1][1] is not None
    # The first read starts from an empty pipeline (every row read, as a baseline).
    assert [p for k, p in probe.calls if k == "read"] == [Pipeline(), None]


def test_a_probe_failing_to_prepare_is_disabled_and_sampling_goes_on(tmp_path):
    class Failing(RecordingProbe):
        def prepare(self, pipeline) -> None:
            raise OSError("uprobe attach failed")

    s = Sampler(procs=tiny_procs(tmp_path), probe=Failing())
    f = s.tick()
    assert s.probe is None
    assert any("uprobe attach failed" in n for n in s.tick().sources.notes), f.sources


def test_interval_below_minimum_is_raised_to_minimum(tmp_path):
    assert Sampler(procs=tiny_procs(tmp_path), interval_s=0.01).interval_s == 0.1


def test_history_is_bounded_and_series_share_one_time_axis(tmp_path):
    s = Sampler(gpu=ScriptedGpu(), procs=tiny_procs(tmp_path))
    h = History(window_s=5, interval_s=1)
    for _ in range(8):
        h.add(s.tick())
    assert len(h) == 5
    assert h.gpu_series("GPU-x", "util") == [90.0] * 5
    assert h.gpu_series("GPU-x", "sm_active") == [10.0] * 5
    assert h.gpu_series("GPU-x", "power_pct") == [25.0] * 5
    assert len(h.proc_series((100, 1000), "preempt_per_s")) == 5
    assert h.gpu_series("GPU-unknown", "util") == []


def test_history_series_start_at_first_sight_and_the_departed_are_forgotten(tmp_path):
    tree = FakeProcTree(tmp_path / "proc")
    tree.write(FakeProc(100, comm=WORKER))
    s = Sampler(procs=HostPass(ProcSource(str(tree.root))))
    h = History(window_s=4, interval_s=1, keep_departed_s=2)
    h.add(s.tick())
    tree.write(FakeProc(200, start=5, comm=WORKER))
    h.add(s.tick())
    tree.remove(100)
    h.add(s.tick())
    assert h.proc_series((200, 5), "preempt_per_s") == [0.0, 0.0]  # no padding before it came
    assert h.proc_series((100, 1000), "preempt_per_s") == [0.0, 0.0, None]
    h.add(s.tick())
    assert h.proc_series((100, 1000), "preempt_per_s") == [0.0, 0.0, None, None]
    h.add(s.tick())
    assert h.proc_series((100, 1000), "preempt_per_s") == []  # gone longer than keep_departed_s
    assert h.latest((100, 1000)) is None and h.preempt_since_watch((100, 1000), 5) is None


class BrokenProcs(ProcSource):
    """A /proc source that fails every tick."""

    def scan(self, now):
        raise OSError("proc unmounted")


def test_a_failure_every_tick_keeps_notes_bounded(tmp_path):
    s = Sampler(procs=HostPass(BrokenProcs(str(tmp_path))))
    for _ in range(50):
        f = s.tick()
    assert f.processes == ()
    assert [n for n in f.sources.notes if "proc unmounted" in n] == [
        "/proc read failed: OSError('proc unmounted')"
    ]
    assert len(s._notes) <= 5
