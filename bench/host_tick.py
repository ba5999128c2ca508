"""Cost of one /proc host tick over many processes and threads, and the sampler's own CPU.

Spawns N real processes with T threads each (a tiny C program, so memory stays
small), then times ProcSource.read() over repeated ticks. Run:

    python bench/host_tick.py                 # 250, 500, 1000 processes x 5 threads
    python bench/host_tick.py --procs 1000 --sampler-seconds 30
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


def time_ticks(ticks: int) -> list[float]:
    src = HostPass()
    src.read(now=time.monotonic())
    out = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        src.read(now=time.monotonic())
        out.append((time.perf_counter() - t0) * 1000)
    return out


def sampler_cpu(seconds: float) -> float:
    s = Sampler(gpu=NoGpuSource("bench"), procs=HostPass(), interval_s=1.0)
    t0 = os.times()
    w0 = time.monotonic()
    s.run(lambda f: None, duration_s=seconds)
    t1 = os.times()
    return 100.0 * ((t1.user + t1.system) - (t0.user + t0.system)) / (time.monotonic() - w0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--procs", type=int, nargs="*", default=[250, 500, 1000])
    ap.add_argument("--threads", type=int, default=5, help="threads per process")
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--sampler-seconds", type=float, default=20.0)
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    baseline = count_tasks()[0]
    with tempfile.TemporaryDirectory() as d:
        exe = build_spawner(d)
        for n in a.procs:
            while count_tasks()[0] > baseline + 20:  # the previous round's children are exiting
                time.sleep(0.2)
            p = spawn(exe, n, a.threads)
            try:
                procs, threads = count_tasks()
                ms = time_ticks(a.ticks)
                med = statistics.median(ms)
                p95 = sorted(ms)[int(0.95 * (len(ms) - 1))]
                print(
                    f"host tick: {procs:5d} processes / {threads:5d} threads: "
                    f"median {med:6.2f} ms, p95 {p95:6.2f} ms, "
                    f"{1000 * med / procs:5.1f} us/process"
                )
                if n == max(a.procs) and a.sampler_seconds > 0:
                    cpu = sampler_cpu(a.sampler_seconds)
                    print(
                        f"sampler at 1 s interval over {a.sampler_seconds:.0f} s "
                        f"with {procs} processes: {cpu:.2f}% of one CPU"
                    )
            finally:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


if __name__ == "__main__":
    main()
