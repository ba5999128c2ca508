"""Cost of one sampler tick over many idle processes and threads, with and without the probe.

Spawns N real idle processes with T threads each (a tiny C program, so memory
stays small), then times ``Sampler.tick()`` (the /proc host side and, as root,
the eBPF probe's read) over repeated ticks 0.25 s apart. With the probe, an
idle process should cost nothing: /proc is read only for processes that ran.

    python bench/host_tick.py                       # 100, 1,000, 5,000 processes; 20,000 threads
    python bench/host_tick.py --shapes 1000x1 --sampler-seconds 30
    python bench/host_tick.py --list-all      # as the TUI samples: every process in the frame
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputop.sampler import HostPass, Sampler
from gputop.sources.base import NoGpuSource
from gputop.sources.sched_probe import BpfSchedProbe

SPAWNER_C = r"""
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
static void *idle(void *a) { (void)a; for (;;) pause(); return 0; }
int main(int argc, char **argv) {
    int procs = atoi(argv[1]), threads = atoi(argv[2]);
    for (int i = 0; i < procs; i++) {
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (int t = 1; t < threads; t++) { pthread_t th; pthread_create(&th, 0, idle, 0); }
            for (;;) pause();
        }
    }
    write(1, "ready\n", 6);
    for (;;) pause();
}
"""


def build_spawner(d: str) -> str:
    src = os.path.join(d, "spawner.c")
    exe = os.path.join(d, "spawner")
    Path(src).write_text(SPAWNER_C)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", exe, src], check=True)
    return exe


def spawn(exe: str, procs: int, threads: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([exe, str(procs), str(threads)], stdout=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.readline()
    # Wait until every child has all its threads.
    want = procs * threads
    while True:
        got = 0
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        raw = f.read()
                except OSError:
                    continue
                rest = raw[raw.rindex(b")") + 2 :].split()
                if int(rest[1]) == p.pid:
                    got += int(rest[17])
        if got >= want:
            return p
        time.sleep(0.1)


def count_tasks() -> tuple[int, int]:
    procs = threads = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            procs += 1
            try:
                threads += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return procs, threads


LIST_ALL = False


def time_ticks(ticks: int, probe: bool) -> list[float]:
    """Microseconds per sampler tick (the /proc host side and, with ``probe``, the probe's read)."""
    p = BpfSchedProbe() if probe else None
    procs = HostPass(list_all=LIST_ALL)
    s = Sampler(gpu=NoGpuSource("bench"), procs=procs, probe=p, interval_s=0.25)
    s.open()
    if p is not None and not p.wait_attached(120):
        raise RuntimeError(f"probe did not attach: {p.status.reason}")
    try:
        for _ in range(3):  # prime: the first full scan, the probe's baseline
            s.tick()
            time.sleep(0.25)
        out = []
        for _ in range(ticks):
            time.sleep(0.25)
            t0 = time.perf_counter()
            f = s.tick()
            out.append((time.perf_counter() - t0) * 1e6)
        if probe and f.sources.sched != "bpf":
            raise RuntimeError("the probe did not serve the ticks")
        return out
    finally:
        s.close()


def sampler_cpu(seconds: float, probe: bool) -> float:
    s = Sampler(
        gpu=NoGpuSource("bench"),
        procs=HostPass(list_all=LIST_ALL),
        probe=BpfSchedProbe() if probe else None,
        interval_s=1.0,
    )
    t0 = os.times()
    w0 = time.monotonic()
    s.run(lambda f: None, duration_s=seconds)
    t1 = os.times()
    s.close()
    return 100.0 * ((t1.user + t1.system) - (t0.user + t0.system)) / (time.monotonic() - w0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--shapes",
        nargs="*",
        default=["100x1", "1000x1", "5000x1", "100x200"],
        help="idle processes x threads each (default 100, 1,000, 5,000 processes; 20,000 threads)",
    )
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--sampler-seconds", type=float, default=0.0)
    ap.add_argument(
        "--list-all", action="store_true", help="every process in each frame, as the TUI samples"
    )
    a = ap.parse_args()
    global LIST_ALL
    LIST_ALL = a.list_all
    root = os.geteuid() == 0
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; µs per tick, median")
    baseline = count_tasks()[0]
    with tempfile.TemporaryDirectory() as d:
        exe = build_spawner(d)
        for shape in a.shapes:
            n, t = (int(x) for x in shape.split("x"))
            while count_tasks()[0] > baseline + 20:  # the previous round's children are exiting
                time.sleep(0.2)
            p = spawn(exe, n, t)
            try:
                procs, threads = count_tasks()
                line = f"{procs:5d} processes / {threads:5d} threads:"
                for probe in (False, True) if root else (False,):
                    us = time_ticks(a.ticks, probe)
                    med = statistics.median(us)
                    p95 = sorted(us)[int(0.95 * (len(us) - 1))]
                    line += f"  {'probe' if probe else '/proc'} {med:8.0f} (p95 {p95:.0f})"
                print(line, flush=True)
                if a.sampler_seconds > 0:
                    for probe in (False, True) if root else (False,):
                        cpu = sampler_cpu(a.sampler_seconds, probe)
                        print(f"  sampler at 1 s, {'probe' if probe else '/proc'}: {cpu:.2f}% CPU")
            finally:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


if __name__ == "__main__":
    main()
