"""ProcSource against a real process: thread counts summed over all its threads, as the
kernel counts them."""

from __future__ import annotations

import os
import signal
import time

from gputop.sampler import HostPass
from tests.procutil import find_proc, kernel_counters, kill_all, spawn_python


def test_thread_counts_are_summed_over_all_threads():
    code = (
        "import threading, time\n"
        "def spin():\n"
        "    while True: time.sleep(0.001)\n"
        "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n"
        "spin()\n"
    )
    p = spawn_python(code)
    try:
        time.sleep(0.5)
        src = HostPass(top_n=200)
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(0.05)
        r = src.read(now=1.0, gpu_pids=[p.pid])
        k = kernel_counters(p.pid)
        os.kill(p.pid, signal.SIGCONT)
        proc = find_proc(r, p.pid)
        assert proc.nthreads == 4
        assert len(proc.threads) == 4
        assert proc.vcsw_total == k.vol
        assert k.vol > 100, "four sleeping threads must switch voluntarily"
    finally:
        kill_all([p])
