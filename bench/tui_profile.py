"""Where the live TUI's main thread spends its time: py-spy samples of the UI thread alone.

    python bench/tui_profile.py                      # 120 s, gputop (probe on as root), 2 fake GPUs
    python bench/tui_profile.py --duration 180 --top 30 --rate 500
    python bench/tui_profile.py --raw stacks.txt     # keep py-spy's collapsed stacks

gputop runs as in bench/tui_cpu.py (a detached tmux session at 120x40, 1 s refresh, the C fake
NVML's 2 GPUs); after its first frame and a warm-up, ``py-spy record --nonblocking`` samples
every thread for the window. Only the main thread's stacks are kept (py-spy names it
MainThread): Textual's event loop, the views, the paint and the terminal writes. For each
function the table prints its share of the main thread's busy samples: ``self`` (samples
with the function on top) and ``total`` (samples with it anywhere on the stack, counted once
per sample). Samples of the loop waiting in epoll are left out, and so are the interpreter's
and asyncio's frames under every sample.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_cpu import Tmux, command, fake_nvml_env, uptime  # noqa: E402


def main_thread_stacks(raw: str) -> list[tuple[list[str], int]]:
    """(frames outermost first, count) of each collapsed stack of the main thread while busy."""
    out = []
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        # py-spy --threads: "thread (TID): NAME;outermost;...;innermost"
        thread, *frames = stack.split(";")
        if not thread.endswith(": MainThread") or not frames:
            continue
        # The event loop waiting for the next event: idle, though py-spy cannot tell.
        if frames[-1].startswith("EpollSelector.select "):
            continue
        out.append((frames, int(count)))
    return out


# The frames under every sample (the interpreter, asyncio, gputop's entry): not worth a line.
PLUMBING = ("<frozen runpy>", "runners.py", "base_events.py", "events.py", "cli.py", "tui.py")
PLUMBING_SUFFIXES = (*(f"({name})" for name in PLUMBING), "App.run (app.py)")


def short(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: one entry per function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    keep = "/".join(parts[-2:]) if parts[-2:-1] in (["widgets"], ["model"]) else parts[-1]
    return f"{name} ({keep})"


def report(stacks: list[tuple[list[str], int]], top: int) -> None:
    total = sum(n for _, n in stacks)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, n in stacks:
        names = [short(f) for f in frames]
        own[names[-1]] += n
        for name in set(names):
            inclusive[name] += n
    print(f"main thread: {total} busy samples (event-loop waits left out)")
    print(f"{'total':>7} {'self':>7}  function")
    shown = [(k, n) for k, n in inclusive.most_common() if not k.endswith(PLUMBING_SUFFIXES)]
    for name, n in shown[:top]:
        print(f"{100 * n / total:6.1f}% {100 * own[name] / total:6.1f}%  {name}")
    print("by self time:")
    for name, n in own.most_common(top):
        print(f"{100 * inclusive[name] / total:6.1f}% {100 * n / total:6.1f}%  {name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=120)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--raw", help="also write py-spy's collapsed stacks here")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if pyspy is None or shutil.which("tmux") is None:
        raise SystemExit("needs py-spy and tmux")
    with tempfile.TemporaryDirectory(prefix="tui-profile-") as tmp:
        env = fake_nvml_env(tmp)
        cmd, mark = command("gputop", args.interval, env, os.path.join(tmp, "unused"))
        started = time.monotonic()
        t = Tmux(f"tui-profile-{os.getpid()}", "120x40", cmd)
        try:
            if t.wait_for(mark, started, 60) is None:
                raise SystemExit(f"no first frame within 60 s:\n{t.screen()}")
            if os.geteuid() == 0 and t.wait_for("sched:bpf", started, 180) is None:
                print("warning: the eBPF probe did not go live", file=sys.stderr)
            time.sleep(args.warmup)
            out = os.path.join(tmp, "stacks.txt")
            spy = [pyspy, "record", "--nonblocking", "--threads", "--format", "raw"]
            spy += ["--rate", str(args.rate), "--duration", str(args.duration)]
            spy += ["--pid", str(t.pid), "--output", out]
            subprocess.run(spy, check=True, capture_output=True)
            raw = Path(out).read_text()
        finally:
            t.close()
    if args.raw:
        Path(args.raw).write_text(raw)
    print(f"{args.duration} s at {args.rate} Hz, interval {args.interval:g} s [{uptime()}]")
    report(main_thread_stacks(raw), args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
