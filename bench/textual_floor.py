"""What a bare Textual app costs here, in the same tmux as bench/tui_cpu.py: the floor under gputop.

    python bench/textual_floor.py                    # idle, 1 line, 8 lines; gputop's driver
    python bench/textual_floor.py --driver textual   # the same with Textual's own driver
    python bench/textual_floor.py --widgets 1 8 16 --duration 20
    python bench/textual_floor.py --layout           # each update with a layout pass too

Each case is an app with N one-line ``Static`` widgets, each updated once per interval
(N = 0: the app only wakes once per interval and changes nothing), without a layout pass
(``update(..., layout=False)``: the text changes, the widget's size never does, as with
gputop's line widgets; ``Static.update`` asks for one by default, and a floor measured with
it counted a layout pass per tick that gputop does not make; ``--layout`` measures that),
run in a detached tmux session (120x40) and measured as bench/tui_cpu.py measures gputop:
utime+stime of its process over the window, % of one core, after a warm-up. The cases
alternate over ``--rounds`` rounds. The difference between the cases is the cost of a changed
widget per tick; the idle case is the floor of an app that wakes once a second.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_cpu import Tmux, status_kib, tree_ticks, uptime  # noqa: E402

READY = "floor-ready"


def child(n_widgets: int, interval_s: float, driver: str, layout: bool) -> None:
    """The measured app (inside tmux): N Statics updated once per interval."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    from gputop.driver import QuietLinuxDriver

    class Floor(App[None]):
        def compose(self) -> ComposeResult:
            yield Static(READY)
            for i in range(n_widgets):
                yield Static(f"line {i}", id=f"w{i}")

        def on_mount(self) -> None:
            self.tick = 0
            self.set_interval(interval_s, self.update_lines)

        def update_lines(self) -> None:
            self.tick += 1
            for i in range(n_widgets):
                static = self.query_one(f"#w{i}", Static)
                static.update(f"line {i}: tick {self.tick}", layout=layout)

    app = Floor(driver_class=QuietLinuxDriver if driver == "gputop" else None)
    app.run()


def measure(n_widgets: int, args: argparse.Namespace) -> tuple[float, float]:
    cmd = " ".join(
        shlex.quote(a)
        for a in (
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(n_widgets),
            "--interval",
            str(args.interval),
            "--driver",
            args.driver,
            *(["--layout"] if args.layout else []),
        )
    )
    session = f"textual-floor-{os.getpid()}-{n_widgets}"
    started = time.monotonic()
    t = Tmux(session, "120x40", f"PYTHONPATH={shlex.quote(str(ROOT))} {cmd}")
    try:
        if t.wait_for(READY, started, 60) is None:
            raise SystemExit(f"{n_widgets} widgets: the app did not start:\n{t.screen()}")
        time.sleep(args.warmup)
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), tree_ticks(t.pid)
        time.sleep(args.duration)
        t1, c1 = time.monotonic(), tree_ticks(t.pid)
        rss = status_kib(t.pid, "VmRSS") / 1024
    finally:
        t.close()
    return 100.0 * (c1 - c0) / hz / (t1 - t0), rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widgets", type=int, nargs="+", default=[0, 1, 8])
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--driver", choices=("gputop", "textual"), default="gputop")
    ap.add_argument("--layout", action="store_true", help="a layout pass with every update")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.interval, args.driver, args.layout)
        return 0
    results: dict[int, list[float]] = {n: [] for n in args.widgets}
    for r in range(args.rounds):
        for n in args.widgets:
            cpu, rss = measure(n, args)
            results[n].append(cpu)
            print(f"round {r + 1}: {n} widgets: {cpu:.2f} % CPU, RSS {rss:.1f} MiB ({uptime()})")
    how = "with a layout pass" if args.layout else "no layout pass"
    print(f"driver {args.driver}, {how}, interval {args.interval:g} s, {args.duration:g} s windows")
    for n, cpus in results.items():
        spread = f" ({min(cpus):.2f}-{max(cpus):.2f})" if len(cpus) > 1 else ""
        print(f"  {n:>3} changed widgets per tick: {sum(cpus) / len(cpus):.2f} %{spread}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
