"""Where the live TUI's CPU goes: its main thread (Textual: views, paint, terminal writes)
against its other threads (the sampler above all), in the same tmux as bench/tui_cpu.py.

    python bench/tui_threads.py                  # gputop (probe on as root), 2 fake GPUs, 1 s
    python bench/tui_threads.py --rounds 3 --interval 0.25
    python bench/tui_threads.py --record         # gputop record alone, for comparison

Each round starts the program in a detached tmux session (120x40) against the C fake NVML,
waits for its first frame, as root until the eBPF probe serves the frames (``sched:bpf``:
the first ones are /proc's alone), and a warm-up, then reads utime+stime of every thread of the
process (``/proc/PID/task/TID/stat``; a thread's own line, never the process's) over the
window. CPU % is of one core. The main thread is the UI (Textual's event loop); the
busiest other thread is the sampler (procfs, NVML, the probe's maps, the diagnosis).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_cpu import Tmux, command, fake_nvml_env, uptime  # noqa: E402

LIVE_TIMEOUT_S = 180.0


def thread_ticks(pid: int) -> dict[int, int]:
    """utime+stime of each thread of ``pid`` now."""
    out: dict[int, int] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def one_round(subject: str, interval_s: float, env: str, warmup_s: float, window_s: float) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "frames.jsonl")
        cmd, mark = command(subject, interval_s, env, out)
        started = time.monotonic()
        t = Tmux(f"tui-threads-{os.getpid()}", "120x40", cmd)
        try:
            output = out if subject == "gputop-record" else None
            if t.wait_for(mark, started, 60, output) is None:
                raise SystemExit(f"{subject}: no first frame within 60 s:\n{t.screen()}")
            # The first frames are /proc's alone: the window starts once the probe serves them.
            live = "-"
            if os.geteuid() == 0:
                bpf = '"sched":"bpf"' if output is not None else "sched:bpf"
                live_s = t.wait_for(bpf, started, LIVE_TIMEOUT_S, output)
                if live_s is None:
                    raise SystemExit(f"{subject}: the eBPF probe did not go live:\n{t.screen()}")
                live = f"{live_s:.1f} s"
            time.sleep(warmup_s)
            before = thread_ticks(t.pid)
            t0 = time.monotonic()
            time.sleep(window_s)
            after = thread_ticks(t.pid)
            elapsed = time.monotonic() - t0
        finally:
            t.close()
    hz = os.sysconf("SC_CLK_TCK")

    def pct(ticks: int) -> float:
        return 100.0 * ticks / hz / elapsed

    used = {tid: after[tid] - before.get(tid, 0) for tid in after}
    main = used.pop(t.pid, 0)
    others = sorted(used.values(), reverse=True)
    busiest = others[0] if others else 0
    return (
        f"{subject:14s} main thread {pct(main):5.2f} %  busiest other thread {pct(busiest):5.2f} %"
        f"  all other threads {pct(sum(others)):5.2f} %  total {pct(main + sum(others)):5.2f} %"
        f"  probe live {live}  [{uptime()}]"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="measure `gputop record` instead")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args()
    subject = "gputop-record" if args.record else "gputop"
    with tempfile.TemporaryDirectory() as nvml_dir:
        env = fake_nvml_env(nvml_dir)
        for r in range(1, args.rounds + 1):
            line = one_round(subject, args.interval, env, args.warmup, args.duration)
            print(f"round {r} {line}", flush=True)


if __name__ == "__main__":
    main()
