"""A real process that renames a thread pt_data_pin is a trainer with a pin-memory entry."""

from __future__ import annotations

import os
import textwrap
import time

from gputop.sampler import HostPass
from tests.procutil import kill_all, spawn_python


def test_real_renamed_thread_is_a_pin_memory_entry():
    code = textwrap.dedent(
        """
        import ctypes, threading, time
        libc = ctypes.CDLL(None)
        def pin():
            libc.prctl(15, b"pt_data_pin", 0, 0, 0)
            time.sleep(60)
        threading.Thread(target=pin, daemon=True).start()
        time.sleep(60)
        """
    )
    p = spawn_python(code)
    try:
        deadline = time.monotonic() + 10
        tid = None
        while tid is None and time.monotonic() < deadline:
            for t in os.listdir(f"/proc/{p.pid}/task"):
                with open(f"/proc/{p.pid}/task/{t}/comm") as f:
                    if f.read().strip() == "pt_data_pin":
                        tid = int(t)
            time.sleep(0.02)
        assert tid is not None
        r = HostPass(top_n=400).read(now=1.0, gpu_pids=[p.pid])
        got = {q.pid: q for q in r.processes}
        assert got[tid].role == "pin_memory" and got[tid].trainer_pid == p.pid
        assert got[p.pid].role == "trainer"
    finally:
        kill_all([p])
