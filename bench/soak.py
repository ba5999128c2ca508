"""gputop's memory and CPU over a long run beside process churn: one line per minute.

    python bench/soak.py                # 500 idle, 10 short-lived/s, --interval 0.25, 30 min
    python bench/soak.py --idle 500 --rate 20 --interval 0.25 --minutes 30
    python bench/soak.py --idle 40 --rate 1 --interval 1 --minutes 15

The TUI runs in tmux (120x40) as a user would start it (`python -m gputop --interval S`;
`--no-bpf` passes through), beside:

- ``--idle`` N idle processes (forked from one helper, each asleep in ``pause()``);
- ``--rate`` R short-lived processes a second (forked from a second helper), each using
  ``--cpu-ms`` of CPU spread over its ``--life-s`` (a slice of CPU every 0.1 s): a data
  pipeline that shells out per file, a compile job, a cron burst. They use CPU on every
  tick they live through, so they reach the table's top consumers and the history: the
  churn that used to grow the TUI without bound.

Every 5 s the main gputop process's VmRSS is read; each minute prints the RSS at its end
and its peak, gputop's CPU over the minute (% of one core: utime+stime of its process tree,
each process once, plus reaped children, as in bench/tui_cpu.py), the short-lived
processes started in it, the processes on the host and the load average. The summary
compares the peak RSS with ``--max-rss`` and the CPU of the last minute with minute 11 (the
10-minute history window has filled by then).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_cpu import Tmux, status_kib, tree_ticks, uptime  # noqa: E402

RSS_EVERY_S = 5.0
JOB_SLICE_S = 0.1
FILLED_MINUTE = 11  # the history window is 10 minutes: from minute 11 on it holds a full one


def _name(comm: bytes) -> None:
    """The process's comm (what gputop's table shows), so helpers read as what they are."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(comm), 0, 0, 0)  # PR_SET_NAME


def idle_child(n: int) -> None:
    """Fork ``n`` processes that sleep until killed (with this helper's process group)."""
    _name(b"soak-idle")
    for _ in range(n):
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
    signal.pause()


def churn_child(rate: float, cpu_ms: float, life_s: float, counter: str) -> None:
    """Fork ``rate`` short-lived CPU users a second; write how many were started to ``counter``."""
    _name(b"soak-churn")
    started = 0
    t0 = time.monotonic()
    last_write = 0.0
    while True:
        due = t0 + started / rate
        now = time.monotonic()
        if now < due:
            time.sleep(min(due - now, 0.1))
        else:
            if os.fork() == 0:
                _name(b"soak-job")
                job(cpu_ms, life_s)
                os._exit(0)
            started += 1
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if now - last_write >= 1.0:
            last_write = now
            tmp = counter + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(started))
            os.replace(tmp, counter)


def job(cpu_ms: float, life_s: float) -> None:
    """Use ``cpu_ms`` of CPU in equal slices, one every 0.1 s, for ``life_s`` seconds."""
    slices = max(1, round(life_s / JOB_SLICE_S))
    born = time.monotonic()
    for k in range(slices):
        end_cpu = time.thread_time() + cpu_ms / 1000 / slices
        while time.thread_time() < end_cpu:
            pass
        time.sleep(max(0.0, born + (k + 1) * life_s / slices - time.monotonic()))


class SoakTmux(Tmux):
    """The TUI's tmux session, closed by waiting for ``q`` to end gputop before the session."""

    def quit(self, timeout_s: float = 60.0) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "q"], check=False)
        deadline = time.monotonic() + timeout_s
        # A zombie has no VmRSS: gputop has exited, its reaping is tmux's business.
        while status_kib(self.pid, "VmRSS") and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, check=False)
        time.sleep(2.0)
        if status_kib(self.pid, "VmRSS"):
            print(f"warning: gputop {self.pid} outlived its tmux session; killed", flush=True)
            os.kill(self.pid, signal.SIGKILL)


@dataclass
class Minute:
    minute: int
    rss_mib: float
    peak_mib: float
    cpu_pct: float
    started: int
    host_procs: int
    load: str


def host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def read_counter(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def helper(*args: str) -> subprocess.Popen[bytes]:
    """This script in a child process of its own session (killed as a group at the end)."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args], start_new_session=True
    )


def stop(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def soak(args: argparse.Namespace) -> int:
    counter = f"/tmp/soak-{os.getpid()}.count"
    helpers = []
    if args.idle:
        helpers.append(helper("--idle-child", str(args.idle)))
    time.sleep(1.0)  # the idle ones exist before gputop's first frame
    py = shlex.quote(sys.executable)
    inner = f"{py} -m gputop --interval {args.interval:g}" + (" --no-bpf" if args.no_bpf else "")
    cmd = f"cd {shlex.quote(str(ROOT))} && exec env TERM=xterm-256color {inner}"
    session = f"mem-soak-{os.getpid()}"
    started = time.monotonic()
    tui = SoakTmux(session, args.size, cmd)
    rows: list[Minute] = []
    try:
        if tui.wait_for("sched:", started, 120) is None:
            raise SystemExit(f"gputop drew no first frame within 120 s:\n{tui.screen()}")
        if args.rate > 0:
            helpers.append(
                helper("--churn-child", str(args.rate), str(args.cpu_ms), str(args.life_s), counter)
            )
        print(
            f"gputop --interval {args.interval:g}{' --no-bpf' if args.no_bpf else ''} in tmux"
            f" {args.size}; {args.idle} idle processes; {args.rate:g} short-lived processes/s"
            f" ({args.cpu_ms:g} ms CPU, alive {args.life_s:g} s); {args.minutes} minutes;"
            f" {os.cpu_count()} CPUs, as {'root' if os.geteuid() == 0 else 'non-root'}",
            flush=True,
        )
        print(
            f"first frame after {time.monotonic() - started:.1f} s,"
            f" RSS {status_kib(tui.pid, 'VmRSS') / 1024:.1f} MiB",
            flush=True,
        )
        print("minute  rss MiB  peak MiB  cpu %  started  host procs  load", flush=True)
        hz = os.sysconf("SC_CLK_TCK")
        for minute in range(1, args.minutes + 1):
            t0, c0, n0 = time.monotonic(), tree_ticks(tui.pid), read_counter(counter)
            peak = 0.0
            end = t0 + 60.0
            while (now := time.monotonic()) < end:
                time.sleep(min(RSS_EVERY_S, end - now))
                rss = status_kib(tui.pid, "VmRSS") / 1024
                if rss == 0:
                    raise SystemExit(f"gputop is gone in minute {minute}:\n{tui.screen()}")
                peak = max(peak, rss)
            t1, c1 = time.monotonic(), tree_ticks(tui.pid)
            row = Minute(
                minute,
                status_kib(tui.pid, "VmRSS") / 1024,
                peak,
                100.0 * (c1 - c0) / hz / (t1 - t0),
                read_counter(counter) - n0,
                host_processes(),
                uptime(),
            )
            rows.append(row)
            print(
                f"{row.minute:6d}  {row.rss_mib:7.1f}  {row.peak_mib:8.1f}  {row.cpu_pct:5.1f}"
                f"  {row.started:7d}  {row.host_procs:10d}  {row.load}",
                flush=True,
            )
        if "sched:" not in tui.screen():
            print("warning: the status line is gone from the screen at the end", flush=True)
    finally:
        for h in helpers:
            stop(h)
        tui.quit()
        for path in (counter, counter + ".tmp"):
            if os.path.exists(path):
                os.unlink(path)
    summary(rows, args.max_rss)
    return 0


def summary(rows: list[Minute], max_rss: float) -> None:
    if not rows:
        return
    peak = max(r.peak_mib for r in rows)
    met = "met" if peak <= max_rss else "NOT met"
    print(f"peak RSS {peak:.1f} MiB (target <= {max_rss:g} MiB: {met})")
    if len(rows) >= FILLED_MINUTE:
        first, last = rows[FILLED_MINUTE - 1], rows[-1]
        change = 100.0 * (last.cpu_pct - first.cpu_pct) / first.cpu_pct if first.cpu_pct else 0.0
        verdict = "within" if abs(change) <= 10 else "NOT within"
        print(
            f"cpu minute {last.minute} {last.cpu_pct:.1f} % vs minute {first.minute}"
            f" {first.cpu_pct:.1f} %: {change:+.1f} % ({verdict} 10 %)"
        )
    else:
        print(f"cpu: fewer than {FILLED_MINUTE} minutes, no filled-window comparison")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=int, default=500, help="idle processes (default 500)")
    ap.add_argument("--rate", type=float, default=10.0, help="short-lived processes a second")
    ap.add_argument("--cpu-ms", type=float, default=50.0, help="CPU each one burns (ms)")
    ap.add_argument("--life-s", type=float, default=0.5, help="how long each one lives (s)")
    ap.add_argument("--interval", type=float, default=0.25, help="gputop --interval")
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--max-rss", type=float, default=80.0, help="RSS target for the summary")
    ap.add_argument("--no-bpf", action="store_true", help="run gputop with --no-bpf")
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--idle-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--churn-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.idle_child is not None:
        idle_child(args.idle_child)
        return 0
    if args.churn_child is not None:
        rate, cpu_ms, life_s, counter = args.churn_child
        churn_child(float(rate), float(cpu_ms), float(life_s), counter)
        return 0
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
