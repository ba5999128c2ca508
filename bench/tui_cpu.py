"""gputop's own CPU and memory in a real terminal (tmux) beside nvitop's, and time to first frame.

    python bench/tui_cpu.py                      # gputop (probe on as root), gputop --no-bpf,
                                                 # gputop record and nvitop, alternating, 2 rounds
    python bench/tui_cpu.py --procs 1000         # the same with 1,000 idle processes on the host
    python bench/tui_cpu.py --rounds 3 --only gputop nvitop
    python bench/tui_cpu.py --interval 0.1 --only gputop gputop-no-bpf
    python bench/tui_cpu.py --mode fixture       # the TUI alone on fixture frames (--rows 50)
    python bench/tui_cpu.py --mode live [--no-bpf]   # `gputop --top 50` on this machine (no GPU)
    python bench/tui_cpu.py --mode demo --demo cpu-contention

compare mode (default): every program sees the same 2 GPUs from the C fake NVML
(tests/fakenvml, through LD_LIBRARY_PATH), in the same tmux size (120x40) at the
same refresh interval (1 s). The subjects run one after another, alternating
(gputop, gputop --no-bpf, gputop record, nvitop, gputop, ...), so a change in the
machine's load hits each of them alike; ``uptime`` is printed with every run. For each
run: time to first frame (gputop: the status line is drawn, the eBPF probe still
compiling in its child at nice 19; nvitop: the GPU name is on screen; ``gputop record``,
the headless sampler with the probe, writing JSON lines to a file: its first line), the
time until gputop's probe is live, then a warm-up (3 s) and the measured window (30 s).
``--procs N`` starts N idle processes (a tiny C program, bench/host_tick.py's spawner)
before the first run and ends them after the last: every subject sees the same host.

CPU % is of one core: utime+stime of the program's process tree over the window,
each process counted once (``/proc/PID/stat`` of a process, never of its threads,
which report the whole process), plus the cutime+cstime of children reaped in the
window. RSS is the main process's VmRSS at the end of the window. nvitop comes
from the ``bench`` extra (``pip install -e '.[bench]'``).

fixture mode: a thread hands precomputed frames (tests/frames_fixture.py, 2 GPUs,
50 processes, a starving verdict) to the app once per interval through the same
``offer_frame`` path the sampler uses, so the number is the TUI's own cost. live
mode: the whole ``gputop --top 50`` on this machine's /proc (no GPU); demo mode: the
whole program on a built-in scenario (its workload runs in other processes, which
are not part of gputop's process tree and are not counted).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GPU_NAME = "H100 80GB HBM3"  # from the fake's default name, drawn by both programs
SUBJECTS = ("gputop", "gputop-no-bpf", "gputop-record", "nvitop")
# The subjects that run with the eBPF probe (as root): each waits until it is live.
PROBED = ("gputop", "gputop-record")


def child(interval_s: float, n_procs: int) -> None:
    """Run the app on fixture frames (inside tmux)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from frames_fixture import make_frames

    from gputop.app import GputopApp

    frames = make_frames(120, n_procs=n_procs)

    class FixtureFeed:
        live = True
        # Feed protocol: the app checks every few seconds why the feed stopped (it never does).
        error: BaseException | None = None

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


# ---- measuring -------------------------------------------------------------------


def count_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


class IdleProcesses:
    """``n`` idle processes (one thread each) for the length of a ``with`` block."""

    def __init__(self, n: int, directory: str) -> None:
        self.n = n
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> IdleProcesses:
        if self.n > 0:
            from bench.host_tick import build_spawner, spawn

            self.proc = spawn(build_spawner(self.directory), self.n, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            # The children die with their parent (PR_SET_PDEATHSIG).
            self.proc.kill()
            self.proc.wait()


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def _tree(root: int) -> list[int]:
    """root and its live descendants, each process once."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def tree_ticks(root: int) -> int:
    """utime+stime of every live process in the tree, plus what its reaped children used."""
    total = 0
    for pid in _tree(root):
        rest = _stat(pid)
        if rest is not None:
            # fields 14-17 of stat: utime, stime, cutime, cstime
            total += sum(int(x) for x in rest[11:15])
    return total


def status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def uptime() -> str:
    with open("/proc/loadavg") as f:
        a, b, c = f.read().split()[:3]
    return f"load average: {a}, {b}, {c}"


@dataclass
class Run:
    subject: str
    first_frame_s: float
    live_s: float | None
    cpu_pct: float
    rss_mib: float
    load: str


class Tmux:
    """One detached tmux session running one program."""

    def __init__(self, name: str, size: str, command: str) -> None:
        self.name = name
        width, height = size.split("x")
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, check=False)
        subprocess.run(
            ["tmux", "new", "-d", "-s", name, "-x", width, "-y", height, command], check=True
        )
        self.pid = int(self._out("display", "-p", "-t", name, "#{pane_pid}").strip())

    def _out(self, *args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self._out("capture-pane", "-p", "-t", self.name)

    def wait_for(
        self, text: str, started: float, timeout_s: float, output: str | None = None
    ) -> float | None:
        """Seconds from ``started`` until ``text`` is on the screen (or in the file ``output``)."""
        while time.monotonic() - started < timeout_s:
            if text in (self.screen() if output is None else file_tail(output)):
                return time.monotonic() - started
            time.sleep(0.02)
        return None

    def close(self) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "q"], check=False)
        time.sleep(0.5)
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, check=False)


def fake_nvml_env(directory: str) -> str:
    """``env`` assignments that make a program load the fake NVML with 2 busy GPUs."""
    sys.path.insert(0, str(ROOT))
    from tests.fakenvml import FakeGpu, FakeNvml

    fake = FakeNvml(
        directory,
        [
            FakeGpu(util=[97, 95, 99, 96], sm_util=[12, 15, 11], power_w=[140, 150]),
            FakeGpu(util=[40, 60, 50], sm_util=[35, 45], power_w=[300, 280]),
        ],
    )
    env = fake.env({})
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


NVITOP_MIN_INTERVAL_S = 0.25  # nvitop refuses shorter intervals


def nvitop_interval(interval_s: float) -> float:
    return max(interval_s, NVITOP_MIN_INTERVAL_S)


def command(subject: str, interval_s: float, nvml_env: str, out: str) -> tuple[str, str]:
    """(shell command for tmux, text that marks its first frame).

    ``gputop record`` writes its frames to ``out``; its mark is looked for there.
    """
    py = shlex.quote(sys.executable)
    env = f"TERM=xterm-256color {nvml_env}"
    if subject == "gputop-record":
        inner = f"{py} -m gputop record --interval {interval_s:g} -o {shlex.quote(out)}"
        mark = '"sched":'
    elif subject.startswith("gputop"):
        inner = f"{py} -m gputop --interval {interval_s:g}"
        if subject == "gputop-no-bpf":
            inner += " --no-bpf"
        mark = "sched:"
    else:
        nvitop = shutil.which("nvitop", path=os.path.dirname(sys.executable))
        if nvitop is None:
            raise SystemExit("nvitop is not installed: pip install -e '.[bench]'")
        # nvitop logs each NVML function the fake lacks once, with a traceback, to
        # stderr, which would land on its screen. (Textual draws on stderr: gputop's stays.)
        inner = f"{shlex.quote(nvitop)} --monitor full --interval {nvitop_interval(interval_s):g}"
        inner += " 2>/dev/null"
        mark = GPU_NAME
    return f"cd {shlex.quote(str(ROOT))} && exec env {env} {inner}", mark


def file_tail(path: str, size: int = 65536) -> str:
    """The end of a file (``gputop record``'s newest frames), "" before it exists."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def measure(
    subject: str,
    cmd: str,
    mark: str,
    size: str,
    warmup_s: float,
    duration_s: float,
    output: str | None = None,
    prefix: str = "tui-cpu",
) -> Run:
    session = f"{prefix}-{os.getpid()}-{subject}"
    started = time.monotonic()
    t = Tmux(session, size, cmd)
    try:
        first = t.wait_for(mark, started, 60, output)
        if first is None:
            raise SystemExit(f"{subject}: no first frame within 60 s:\n{t.screen()}")
        live = None
        if subject in PROBED and os.geteuid() == 0:
            bpf = '"sched":"bpf"' if output is not None else "sched:bpf"
            live = t.wait_for(bpf, started, 180, output)
            if live is None:
                print(f"warning: {subject}: the eBPF probe did not go live", file=sys.stderr)
        time.sleep(warmup_s)
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), tree_ticks(t.pid)
        time.sleep(duration_s)
        t1, c1 = time.monotonic(), tree_ticks(t.pid)
        rss = status_kib(t.pid, "VmRSS")
        load = uptime()
    finally:
        t.close()
    return Run(subject, first, live, 100.0 * (c1 - c0) / hz / (t1 - t0), rss / 1024, load)


def compare(args: argparse.Namespace) -> int:
    subjects = args.only or list(SUBJECTS)
    if shutil.which("tmux") is None:
        raise SystemExit("needs tmux")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="tui-cpu-") as tmp, IdleProcesses(args.procs, tmp):
        nvml_env = fake_nvml_env(tmp)
        print(
            f"size {args.size}, interval {args.interval:g} s, warm-up {args.warmup:g} s,"
            f" window {args.duration:g} s, 2 fake GPUs, {args.rounds} rounds, as"
            f" {'root' if os.geteuid() == 0 else 'non-root (no eBPF probe)'},"
            f" {count_processes()} processes on the host ({args.procs} idle added)"
        )
        if "nvitop" in subjects and args.interval < NVITOP_MIN_INTERVAL_S:
            print(f"nvitop refuses intervals below {NVITOP_MIN_INTERVAL_S:g} s: it runs at that")
        for r in range(args.rounds):
            for subject in subjects:
                out = os.path.join(tmp, f"record-{r}.jsonl")
                cmd, mark = command(subject, args.interval, nvml_env, out)
                output = out if subject == "gputop-record" else None
                run = measure(
                    subject, cmd, mark, args.size, args.warmup, args.duration, output, args.session
                )
                if output is not None:
                    os.unlink(output)
                runs.append(run)
                live = f", probe live {run.live_s:.2f} s" if run.live_s is not None else ""
                print(
                    f"round {r + 1} {subject:14s} cpu {run.cpu_pct:5.2f} %  rss"
                    f" {run.rss_mib:5.1f} MiB  first frame {run.first_frame_s:.2f} s{live}"
                    f"  [{run.load}]",
                    flush=True,
                )
    print("mean over rounds:")
    means: dict[str, tuple[float, float]] = {}
    for subject in subjects:
        mine = [r for r in runs if r.subject == subject]
        cpu = sum(r.cpu_pct for r in mine) / len(mine)
        rss = sum(r.rss_mib for r in mine) / len(mine)
        means[subject] = (cpu, rss)
        first = max(r.first_frame_s for r in mine)
        print(f"  {subject:14s} cpu {cpu:5.2f} %  rss {rss:5.1f} MiB  first frame <= {first:.2f} s")
    if "nvitop" in means and means["nvitop"][0] > 0:
        for subject in subjects:
            if subject != "nvitop":
                ratio = means[subject][0] / means["nvitop"][0]
                print(f"  cpu ratio {subject} / nvitop: {ratio:.2f}")
    print(f"host at the end: {uptime()} on {os.cpu_count()} CPUs (shared machine)")
    return 0


def single(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="tui-cpu-") as tmp, IdleProcesses(args.procs, tmp):
        return _single(args)


def _single(args: argparse.Namespace) -> int:
    py = shlex.quote(sys.executable)
    if args.mode == "fixture":
        inner = f"{py} {shlex.quote(__file__)} --child --interval {args.interval}"
        inner += f" --rows {args.rows}"
        subject = "fixture"
    else:
        inner = f"{py} -m gputop --interval {args.interval:g} --top {args.rows}"
        if args.mode == "demo":
            inner += f" --demo {shlex.quote(args.demo)}"
        if args.no_bpf:
            inner += " --no-bpf"
        subject = "gputop-no-bpf" if args.no_bpf else "gputop"
    cmd = f"cd {shlex.quote(str(ROOT))} && exec env TERM=xterm-256color {inner}"
    run = measure(
        subject, cmd, "sched:", args.size, args.warmup, args.duration, prefix=args.session
    )
    mode = f"demo {args.demo}" if args.mode == "demo" else args.mode
    print(f"mode: {mode}  size: {args.size}  interval: {args.interval:g} s  rows: {args.rows}")
    print(f"processes on the host: {count_processes()} ({args.procs} idle added)")
    print(f"time to first frame: {run.first_frame_s:.2f} s")
    if run.live_s is not None:
        print(f"eBPF probe live after: {run.live_s:.2f} s")
    print(f"cpu: {run.cpu_pct:.2f} % of one core over {args.duration:g} s")
    print(f"rss: {run.rss_mib:.1f} MiB")
    print(f"host: {run.load} on {os.cpu_count()} CPUs (shared machine)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("compare", "fixture", "live", "demo"), default="compare")
    ap.add_argument("--demo", default="cpu-contention", help="scenario for --mode demo")
    ap.add_argument("--no-bpf", action="store_true", help="live/demo: run gputop with --no-bpf")
    ap.add_argument("--only", nargs="+", choices=SUBJECTS, help="compare: these subjects")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--procs", type=int, default=0, help="start this many idle processes for the run"
    )
    ap.add_argument("--rows", type=int, default=50, help="fixture: rows; live/demo: --top")
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--session", default="tui-cpu", help="tmux session name prefix")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.interval, args.rows)
        return 0
    return compare(args) if args.mode == "compare" else single(args)


if __name__ == "__main__":
    sys.exit(main())
