"""What gputop's eBPF probe costs per context switch, against bcc's runqlat.

Runs ``perf bench sched pipe`` pinned to one CPU (nothing but context switches:
the worst case for a sched_switch probe), interleaved: baseline, with gputop's
probe attached (read once a second, as gputop does), and with ``runqlat-bpfcc``
running. Then, with ``kernel.bpf_stats_enabled``, the run time per event of each
attached program. Needs root, perf, taskset and bcc's tools.

    python bench/probe_overhead.py [--rounds 5] [--loops 200000] [--cpu 0]

Each pipe operation is two context switches (one each way), which the script
checks against the kernel's own switch counter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ctxt() -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    raise RuntimeError("no ctxt in /proc/stat")


def _cpu_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:9]]
    return sum(vals), vals[3] + vals[4]


def pipe_bench(cpu: int, loops: int) -> tuple[float, float]:
    """(µs per pipe operation, context switches per operation on the whole machine)."""
    c0 = _ctxt()
    out = subprocess.run(
        ["taskset", "-c", str(cpu), "perf", "bench", "sched", "pipe", "-l", str(loops)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    c1 = _ctxt()
    m = re.search(r"([\d.]+)\s+usecs/op", out)
    if m is None:
        raise RuntimeError(f"cannot parse perf bench output:\n{out}")
    return float(m.group(1)), (c1 - c0) / loops


def prog_stats(pid: int) -> dict[int, tuple[int, int]]:
    """prog_id -> (run_time_ns, run_cnt) for every BPF program that pid holds."""
    out: dict[int, tuple[int, int]] = {}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_time_ns" in info:
            out[int(info["prog_id"])] = (int(info["run_time_ns"]), int(info["run_cnt"]))
    return out


class Attached:
    """A process holding a probe attached until stop()."""

    def __init__(self, argv: list[str], ready: str) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT),
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[0]} exited before attaching")
            if ready in line:
                break
        else:
            raise RuntimeError(f"{argv[0]} did not attach within 300 s")
        # gputop's helper names its programs: "attached {prog_id: name}".
        self.names: dict[int, str] = {}
        if line.startswith("attached {"):
            self.names = {int(k): v for k, v in json.loads(line[len("attached ") :]).items()}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def gputop_probe() -> Attached:
    return Attached([sys.executable, os.path.abspath(__file__), "--hold-probe"], "attached")


def runqlat() -> Attached:
    exe = shutil.which("runqlat-bpfcc") or shutil.which("runqlat")
    if exe is None:
        raise RuntimeError("runqlat-bpfcc not found (apt-get install bpfcc-tools)")
    # One histogram a second, like a monitoring tool would, for an hour at most.
    return Attached([exe, "1", "3600"], "Tracing run queue latency")


def hold_probe() -> int:
    """Helper process: attach gputop's probe, read it every second until SIGINT."""
    sys.path.insert(0, ROOT)
    from gputop.sources.sched_probe import BpfSchedProbe

    # Normal priority: this measures run time, not attaching (bench/probe_attach.py).
    probe = BpfSchedProbe(compile_nice=0)
    probe.open()
    if not probe.wait_attached(300):
        print(f"failed: {probe.status.reason}", flush=True)
        return 1
    names = {}
    for name, fd in probe.program_fds().items():
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("prog_id:"):
                    names[int(line.split()[1])] = name
    print("attached " + json.dumps(names), flush=True)
    try:
        while True:
            time.sleep(1.0)
            probe.read()
    except KeyboardInterrupt:
        pass
    finally:
        probe.close()
    return 0


def _per_event(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], names: dict[int, str]
) -> str:
    parts = []
    total_ns = switches = 0
    for prog, (t1, n1) in sorted(after.items()):
        t0, n0 = before.get(prog, (0, 0))
        if n1 > n0:
            name = names.get(prog, f"prog {prog}")
            parts.append(f"{name}: {(t1 - t0) / (n1 - n0):.0f} ns x {n1 - n0} runs")
            total_ns += t1 - t0
            if "sched_switch" in name:
                switches += n1 - n0
    if switches:
        # Every program's run time (wake-ups, interrupt depth...) per context switch.
        parts.append(f"all programs per sched_switch: {total_ns / switches:.0f} ns")
    return "; ".join(parts) or "no runs recorded"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loops", type=int, default=200000)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--hold-probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hold_probe:
        return hold_probe()
    if os.geteuid() != 0:
        print("needs root (eBPF)", file=sys.stderr)
        return 2
    for tool in ("perf", "taskset"):
        if shutil.which(tool) is None:
            print(f"needs {tool}", file=sys.stderr)
            return 2

    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    busy0 = _cpu_busy()
    results: dict[str, list[float]] = {"baseline": [], "gputop": [], "runqlat": []}
    switches_per_op: list[float] = []
    for r in range(args.rounds):
        # Rotate the order each round so drift in the machine's load hits all three.
        order = ["baseline", "gputop", "runqlat"]
        order = order[r % 3 :] + order[: r % 3]
        for mode in order:
            holder = None
            if mode == "gputop":
                holder = gputop_probe()
            elif mode == "runqlat":
                holder = runqlat()
            try:
                us, spo = pipe_bench(args.cpu, args.loops)
            finally:
                if holder is not None:
                    holder.stop()
            results[mode].append(us)
            if mode == "baseline":
                switches_per_op.append(spo)
    busy1 = _cpu_busy()
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    tot, idle = busy1[0] - busy0[0], busy1[1] - busy0[1]

    print(f"perf bench sched pipe -l {args.loops}, taskset -c {args.cpu}, {args.rounds} rounds")
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)};")
    print(f"machine CPU busy during the runs {100.0 * (tot - idle) / max(1, tot):.0f}%")
    print(f"context switches per pipe op (whole machine): {statistics.median(switches_per_op):.2f}")
    base = statistics.median(results["baseline"])
    for mode, vals in results.items():
        med = statistics.median(vals)
        added = (med - base) / 2.0
        runs = " ".join(f"{v:.3f}" for v in vals)
        extra = "" if mode == "baseline" else f", added per context switch {added:+.3f} us"
        print(f"{mode:9s} median {med:.3f} us/op [{runs}]{extra}")

    # Per-event run time: with stats on (they cost a little themselves, so the
    # timings above ran without them).
    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    with open(stats_path) as f:
        old = f.read().strip()
    try:
        with open(stats_path, "w") as f:
            f.write("1")
        for label, start in (("gputop", gputop_probe), ("runqlat", runqlat)):
            holder = start()
            try:
                before = prog_stats(holder.proc.pid)
                pipe_bench(args.cpu, args.loops)
                after = prog_stats(holder.proc.pid)
            finally:
                holder.stop()
            print(
                f"{label} run time per event (bpf_stats): {_per_event(before, after, holder.names)}"
            )
    finally:
        with open(stats_path, "w") as f:
            f.write(old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
