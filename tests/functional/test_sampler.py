"""The sampler on the clock: ticks never overlap and follow the interval, and its background
thread delivers frames and stops."""

from __future__ import annotations

import itertools
import threading
import time

from gputop.sampler import Sampler
from tests.samplerutil import ScriptedGpu, tiny_procs


def test_ticks_never_overlap_and_follow_the_interval(tmp_path):
    gpu = ScriptedGpu(delay_s=0.15)  # each tick overruns the 0.1 s interval
    s = Sampler(gpu=gpu, procs=tiny_procs(tmp_path), interval_s=0.1)
    frames = []
    s.run(frames.append, duration_s=1.0)
    assert gpu.max_active == 1
    assert 3 <= len(frames) <= 8
    gaps = [b.t - a.t for a, b in itertools.pairwise(frames)]
    assert min(gaps) >= 0.15  # next tick only after the previous one ended


def test_background_thread_delivers_frames_and_stops(tmp_path):
    s = Sampler(gpu=ScriptedGpu(), procs=tiny_procs(tmp_path), interval_s=0.1)
    got: list = []
    done = threading.Event()

    def on_frame(f):
        got.append(f)
        if len(got) == 3:
            done.set()

    s.start(on_frame)
    assert done.wait(5)
    s.close()
    n = len(got)
    time.sleep(0.3)
    assert len(got) == n
    assert [f.seq for f in got[:3]] == [2, 3, 4]
