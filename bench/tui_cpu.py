"""gputop's own CPU and memory in a real terminal (tmux), and its time to first frame.

    python bench/tui_cpu.py                 # TUI on fixture frames: 2 GPUs, 50 process rows
    python bench/tui_cpu.py --mode live     # real `gputop --top 50` (/proc sampler, no GPU)
    python bench/tui_cpu.py --mode demo --demo cpu-contention   # `gputop --demo NAME --top 50`
    python bench/tui_cpu.py --duration 20 --size 80x24

fixture mode: a thread hands precomputed frames (tests/frames_fixture.py, 2 GPUs, 50
processes, a starving verdict) to the app once per interval through the same
``offer_frame`` path the sampler uses, so the number is the TUI's own cost
(message, history, banner, GPU panels, table diff, status line, terminal output).
live mode: the whole program, sampler included, on this machine's /proc. demo mode:
the whole program on a built-in scenario (its workload runs in other processes,
which are not counted).

CPU % is of one core, from /proc/PID/stat utime+stime over the measured window
(after the first frame); RSS from /proc/PID/status. Prints one line per number.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One tmux session per run: other benchmarks may run beside this one.
SESSION = f"gputop-bench-{os.getpid()}"
FIRST_FRAME_MARK = "sched:"  # the status line names the sources once a frame has arrived


def child(interval_s: float, n_procs: int, n_gpus: int) -> None:
    """Run the app on fixture frames (inside tmux)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from frames_fixture import make_frames

    from gputop.app import GputopApp

    frames = make_frames(120, n_procs=n_procs, n_gpus=n_gpus)

    class FixtureFeed:
        live = True

        def __init__(self) -> None:
            self.stop_event = threading.Event()

        def start(self, app: GputopApp) -> None:
            def run() -> None:
                i = 0
                t0 = time.time()
                while not self.stop_event.wait(interval_s if i else 0.0):
                    f = frames[i % len(frames)]
                    app.offer_frame(replace(f, t=t0 + i * interval_s, seq=i + 1))
                    i += 1

            threading.Thread(target=run, daemon=True).start()

        def stop(self) -> None:
            self.stop_event.set()

        def statuses(self) -> list[object]:
            return []

    GputopApp(FixtureFeed(), interval_s=interval_s).run()  # type: ignore[arg-type]


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        rest = fh.read().rsplit(b")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _pane(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("fixture", "live", "demo"), default="fixture")
    ap.add_argument("--demo", default="cpu-contention", help="scenario for --mode demo")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--procs", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=2, help="fixture: GPUs in the frames")
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--no-bpf", action="store_true", help="live/demo: run gputop with --no-bpf")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.interval, args.procs, args.gpus)
        return 0

    width, height = args.size.split("x")
    py = shlex.quote(sys.executable)
    if args.mode == "fixture":
        inner = (
            f"{py} {shlex.quote(__file__)} --child --interval {args.interval} --procs {args.procs}"
            f" --gpus {args.gpus}"
        )
    else:
        inner = f"{py} -m gputop --interval {args.interval} --top {args.procs}"
        if args.mode == "demo":
            inner += f" --demo {shlex.quote(args.demo)}"
        if args.no_bpf:
            inner += " --no-bpf"
    env = "TERM=xterm-256color"
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    started = time.monotonic()
    subprocess.run(
        [
            "tmux",
            "new",
            "-d",
            "-s",
            SESSION,
            "-x",
            width,
            "-y",
            height,
            f"cd {shlex.quote(str(ROOT))} && exec env {env} {inner}",
        ],
        check=True,
    )
    try:
        pid = int(_pane(["tmux", "display", "-p", "-t", SESSION, "#{pane_pid}"]).strip())
        first_frame_s = None
        while time.monotonic() - started < 30:
            if FIRST_FRAME_MARK in _pane(["tmux", "capture-pane", "-p", "-t", SESSION]):
                first_frame_s = time.monotonic() - started
                break
            time.sleep(0.02)
        if first_frame_s is None:
            print("no first frame within 30 s:", file=sys.stderr)
            print(_pane(["tmux", "capture-pane", "-p", "-t", SESSION]), file=sys.stderr)
            return 1
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), _ticks(pid)
        time.sleep(args.duration)
        t1, c1 = time.monotonic(), _ticks(pid)
        rss = _status_kib(pid, "VmRSS")
        hwm = _status_kib(pid, "VmHWM")
        screen = _pane(["tmux", "capture-pane", "-p", "-t", SESSION])
    finally:
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "q"], check=False)
        time.sleep(0.5)
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    cpu_pct = 100.0 * (c1 - c0) / hz / (t1 - t0)
    load = os.getloadavg()[0]
    mode = f"demo {args.demo}" if args.mode == "demo" else args.mode
    gpus = f"  gpus: {args.gpus}" if args.mode == "fixture" else ""
    print(
        f"mode: {mode}  size: {args.size}  interval: {args.interval:g} s  rows: {args.procs}{gpus}"
    )
    print(f"time to first frame: {first_frame_s:.2f} s")
    print(f"cpu: {cpu_pct:.2f} % of one core over {t1 - t0:.0f} s")
    print(f"rss: {rss / 1024:.1f} MiB (peak {hwm / 1024:.1f} MiB)")
    print(f"host load1 during the run: {load:.2f} on {os.cpu_count()} CPUs (shared machine)")
    if "BUSY BUT STARVING" not in screen and args.mode == "fixture":
        print("warning: the banner was not on screen at the end", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
