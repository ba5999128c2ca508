"""How long gputop takes to exit after q, SIGINT or SIGTERM: at each moment of its start-up,
and once running with the probe attached on a node whose CPUs are all busy.

    python bench/exit_latency.py [--rounds 5] [--no-bpf]
    python bench/exit_latency.py --loaded [--rounds 20] [--hogs-per-cpu 2] [--loader libbpf]

Runs the real TUI in a pseudo-terminal (120x40), or ``gputop record``, and prints the time
from the key or signal to the process's exit (the moment the shell would get its prompt
back: every thread gone), with the exit statuses.

Start-up (default): the signal comes when gputop's own code has started (its handlers are
installed), while the eBPF probe compiles (its compile child runs; root only) and once it
draws frames.

``--loaded``: the load that once held gputop's exit for 11 minutes. Hogs pinned to every
CPU run in this script's session, which is weighted like a session at nice -20 (its
autogroup; the scenario tests do the same), so the kernel's own threads (RCU, workqueues)
get about 1 % of a CPU. gputop (TUI and record) runs in a session of its own weighted the
same, so it competes with the hogs as one busy user's job with another's; the key or
signal comes once a frame says the eBPF probe is attached. An exit that has to wait for
the kernel (an RCU grace period) shows here as seconds to minutes. Needs root.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
# How long a loaded exit may take before the bench stops waiting and kills gputop.
GIVE_UP_S = 120.0


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


def _weigh(pid: int, nice: int | None) -> None:
    """Weigh process ``pid``'s session (autogroup) like a session at ``nice`` (None: leave it)."""
    if nice is not None:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _env(loader: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color")
    if loader:
        env["GPUTOP_BPF_LOADER"] = loader
    return env


def _wait_gone(p: subprocess.Popen[bytes]) -> tuple[float, int]:
    """Seconds until ``p`` exits (from now) and its status; killed after GIVE_UP_S."""
    t0 = time.monotonic()
    try:
        rc = p.wait(timeout=GIVE_UP_S)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    return time.monotonic() - t0, rc


def tui(
    moment: str, how: str, no_bpf: bool, loader: str | None = None, nice: int | None = None
) -> tuple[float, int]:
    """One TUI run: (seconds from ``how`` (q, SIGINT, SIGTERM) to exit, exit status)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    args = ["--interval", "0.5", *(["--no-bpf"] if no_bpf else [])]
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=_env(loader),
        start_new_session=True,
    )
    _weigh(p.pid, nice)
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
        "probe-attached": lambda: b"sched:bpf" in out,
    }
    cond = conditions[moment]
    deadline = time.monotonic() + 60
    while not cond():
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            raise SystemExit(f"{moment}: never reached")
        time.sleep(0.005)
    if how == "q":
        os.write(master, b"q")
    else:
        p.send_signal(signal.Signals[how])
    took, rc = _wait_gone(p)
    os.close(master)
    return took, rc


def record(how: str, loader: str | None, nice: int | None = None) -> tuple[float, int]:
    """One ``gputop record`` run, stopped by SIGINT or SIGTERM once a frame came from the probe."""
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", "--interval", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=_env(loader),
        start_new_session=True,
    )
    _weigh(p.pid, nice)
    assert p.stdout is not None
    for line in p.stdout:
        if b'"sched":"bpf"' in line:
            break
    else:
        raise SystemExit(f"record ended before an eBPF frame (status {p.wait()})")
    p.send_signal(signal.Signals[how])
    # Keep reading so a frame written meanwhile never blocks it on a full pipe.
    threading.Thread(target=p.stdout.read, daemon=True).start()
    return _wait_gone(p)


# The weight of the loaded sessions (the hogs', gputop's): an autogroup's nice value.
LOADED_NICE = -20


@contextmanager
def loaded_node(hogs_per_cpu: int) -> Iterator[None]:
    """Hogs pinned to every CPU, in this session weighted like nice -20 (its autogroup)."""
    group = Path("/proc/self/autogroup")
    before = group.read_text().split()[-1]
    group.write_text(str(LOADED_NICE))
    cpus = sorted(os.sched_getaffinity(0))
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG, str(c)])
        for c in cpus
        for _ in range(hogs_per_cpu)
    ]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        group.write_text(before)


def _line(label: str, runs: list[tuple[float, int]], limit_s: float | None = None) -> None:
    times = [t for t, _ in runs]
    codes = sorted({rc for _, rc in runs})
    over = "" if limit_s is None else f"  over {limit_s:g} s: {sum(t > limit_s for t in times)}"
    print(
        f"{label:<28} {len(times):>4} {statistics.median(times):>9.3f} {max(times):>7.3f}"
        f"  {codes}{over}",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-bpf", action="store_true")
    ap.add_argument("--loaded", action="store_true", help="exit with the probe on a busy node")
    ap.add_argument("--hogs-per-cpu", type=int, default=2)
    ap.add_argument("--loader", choices=("libbpf", "bcc"), help="force the probe's loader")
    ap.add_argument("--limit", type=float, default=5.0, help="count exits slower than this")
    args = ap.parse_args()
    print(f"{'case':<28} {'runs':>4} {'median s':>9} {'max s':>7}  exit statuses")
    if args.loaded:
        if os.geteuid() != 0:
            raise SystemExit("--loaded needs root (the eBPF probe and the session's weight)")
        ncpu = len(os.sched_getaffinity(0))
        print(f"# {args.hogs_per_cpu} hogs pinned to each of {ncpu} CPUs, session at nice -20")
        with loaded_node(args.hogs_per_cpu):
            for how in ("q", "SIGINT", "SIGTERM"):
                runs = [
                    tui("probe-attached", how, False, args.loader, LOADED_NICE)
                    for _ in range(args.rounds)
                ]
                _line(f"tui {how}", runs, args.limit)
            for how in ("SIGINT", "SIGTERM"):
                runs = [record(how, args.loader, LOADED_NICE) for _ in range(args.rounds)]
                _line(f"record {how}", runs, args.limit)
        return 0
    moments = ["start-up", "running"]
    if not args.no_bpf and os.geteuid() == 0:
        moments.insert(1, "probe-compile")
    for moment in moments:
        for sig in ("SIGINT", "SIGTERM"):
            runs = [tui(moment, sig, args.no_bpf) for _ in range(args.rounds)]
            _line(f"{moment} {sig}", runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
