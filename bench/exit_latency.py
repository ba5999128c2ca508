"""How long gputop takes to exit after SIGINT or SIGTERM, at each moment of its start-up.

    python bench/exit_latency.py [--rounds 5] [--no-bpf]

Runs the real TUI in a pseudo-terminal (120x40), sends the signal when gputop's own
code has started (its handlers are installed), while the eBPF probe compiles (its
compile child runs; root only) and once it draws frames, and prints the time from
the signal to the process's exit, with its exit status.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _status_bit(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except OSError:
        pass
    return False


def _compiling(pid: int) -> bool:
    """The probe's compile-and-attach child (gputop.sources.bpf_child) runs."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
        return any("bpf_child" in " ".join(k.cmdline()) for k in kids)
    except psutil.Error:
        return False


def one(moment: str, sig: int, no_bpf: bool) -> tuple[float, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    args = ["--interval", "0.5", *(["--no-bpf"] if no_bpf else [])]
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color"),
        start_new_session=True,
    )
    os.close(slave)
    out = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            out.extend(chunk)

    threading.Thread(target=drain, daemon=True).start()
    conditions: dict[str, Callable[[], bool]] = {
        "start-up": lambda: _status_bit(p.pid, signal.SIGTERM),
        "probe-compile": lambda: _compiling(p.pid),
        "running": lambda: b"sched:" in out,
    }
    cond = conditions[moment]
    deadline = time.monotonic() + 60
    while not cond():
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            raise SystemExit(f"{moment}: never reached")
        time.sleep(0.005)
    t0 = time.monotonic()
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    took = time.monotonic() - t0
    os.close(master)
    return took, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-bpf", action="store_true")
    args = ap.parse_args()
    moments = ["start-up", "running"]
    if not args.no_bpf and os.geteuid() == 0:
        moments.insert(1, "probe-compile")
    print(f"{'moment':<14} {'signal':<8} {'median s':>9} {'max s':>7}  exit statuses")
    for moment in moments:
        for sig in (signal.SIGINT, signal.SIGTERM):
            runs = [one(moment, sig, args.no_bpf) for _ in range(args.rounds)]
            times = [t for t, _ in runs]
            codes = sorted({rc for _, rc in runs})
            print(
                f"{moment:<14} {sig.name:<8} {statistics.median(times):>9.3f} "
                f"{max(times):>7.3f}  {codes}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
