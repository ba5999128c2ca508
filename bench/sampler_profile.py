"""Where the TUI's sampler thread spends its time: cProfile inside that thread, per tick.

    python bench/sampler_profile.py                  # 120 s at 1 s, probe on as root, 2 fake GPUs
    python bench/sampler_profile.py --seconds 60 --top 30
    python bench/sampler_profile.py --record         # `gputop record`'s sampler, for comparison

The whole TUI runs in a detached tmux session (120x40) against the C fake NVML (2 GPUs,
as bench/tui_cpu.py and bench/tui_threads.py set it up), with ``Sampler.tick`` wrapped
in a profiler: from the first tick the eBPF probe served (``sched:bpf``; as non-root,
from the first tick) each tick is profiled on the sampler's own thread, not the sleep
between, for ``--seconds``. Printed: the thread's CPU per tick (``time.thread_time``
around each tick, the profiler's own cost in it), then the functions with the most own
time and the most cumulative time, each per tick, and the garbage collections (by
generation) that ran in the ticks, on the sampler's thread between them and on other
threads, with their CPU: cProfile does not see them, and the thread whose allocation
crosses a threshold pays for a collection of the whole heap's generation.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_cpu import Tmux, fake_nvml_env, uptime  # noqa: E402

LIVE_TIMEOUT_S = 180.0


def child(seconds: float, interval_s: float, out: str, record: bool) -> int:
    """Run the TUI (or ``gputop record``) with its sampler's ticks profiled; write the
    stats to ``out``."""
    from gputop.cli import main
    from gputop.sampler import Sampler

    prof = cProfile.Profile()
    tick = Sampler.tick
    # Garbage collections by thread and generation while profiling: (count, CPU s). The
    # thread whose allocation crosses a threshold pays for the collection (cProfile does
    # not see it); the callbacks themselves cost microseconds.
    gcs: dict[str, list[float]] = {}
    gc_began: dict[int, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if state["t0"] is None or state["done"]:
            return
        me = threading.get_ident()
        if phase == "start":
            gc_began[me] = time.thread_time()
            return
        began = gc_began.pop(me, None)
        if began is not None:
            where = "other threads"
            if me == state["sampler"]:
                where = "in ticks" if state["in_tick"] else "sampler thread between ticks"
            slot = gcs.setdefault(f"{where}, gen{info['generation']}", [0, 0.0])
            slot[0] += 1
            slot[1] += time.thread_time() - began

    state: dict[str, Any] = {"live": os.geteuid() != 0, "done": False}
    state.update(t0=None, ticks=0, cpu_s=0.0, sampler=None, in_tick=False)
    gc.callbacks.append(on_gc)

    def profiled(self: Sampler) -> Any:
        if state["done"] or not state["live"]:
            frame = tick(self)
            state["live"] = state["live"] or frame.sources.sched == "bpf"
            return frame
        if state["t0"] is None:
            state["t0"] = time.monotonic()
            state["sampler"] = threading.get_ident()
        c0 = time.thread_time()
        state["in_tick"] = True
        prof.enable()
        frame = tick(self)
        prof.disable()
        state["in_tick"] = False
        state["cpu_s"] += time.thread_time() - c0
        state["ticks"] += 1
        if time.monotonic() - state["t0"] >= seconds:
            state["done"] = True
            prof.dump_stats(out + ".prof")
            facts = {k: state[k] for k in ("ticks", "cpu_s")}
            facts["wall_s"] = time.monotonic() - state["t0"]
            facts["procs"] = sum(1 for n in os.listdir("/proc") if n.isdigit())
            facts["gc"] = gcs
            facts["gc_objects"] = len(gc.get_objects())
            Path(out).write_text(json.dumps(facts))
        return frame

    Sampler.tick = profiled  # type: ignore[method-assign]
    if record:
        return main(["record", "--interval", f"{interval_s:g}", "-o", os.devnull])
    return main(["--interval", f"{interval_s:g}"])


def report(out: str, top: int, interval_s: float) -> None:
    facts = json.loads(Path(out).read_text())
    ticks = facts["ticks"]
    print(
        f"{ticks} ticks at {interval_s:g} s over {facts['wall_s']:.0f} s,"
        f" {facts['procs']} processes on the host [{uptime()}]"
    )
    print(
        f"sampler thread's ticks (profiled): {1e3 * facts['cpu_s'] / ticks:.2f} ms CPU per tick,"
        f" {100 * facts['cpu_s'] / facts['wall_s']:.2f} % of one core"
    )
    print(f"garbage collections (heap: {facts['gc_objects']} tracked objects), per tick:")
    for key, (n, cpu_s) in sorted(facts["gc"].items()):
        print(f"  {key}: {n / ticks:.2f} collections, {1e3 * cpu_s / ticks:.3f} ms CPU")
    rows = pstats.Stats(out + ".prof").stats  # type: ignore[attr-defined]
    for title, col in (("own time", 2), ("cumulative time", 3)):
        print(f"\ntop {top} by {title}, per tick: calls, own ms, cumulative ms")
        order = sorted(rows.items(), key=lambda kv: -kv[1][col])[:top]
        for (file, line, fn), (_cc, nc, tt, ct, _callers) in order:
            where = f"{Path(file).name}:{line}" if line else file
            own, cum = 1e3 * tt / ticks, 1e3 * ct / ticks
            print(f"  {nc / ticks:8.1f} {own:7.3f} {cum:7.3f}  {fn} ({where})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--record", action="store_true", help="profile `gputop record` instead")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.exit(child(args.seconds, args.interval, args.child, args.record))
    with tempfile.TemporaryDirectory() as d:
        env = fake_nvml_env(d)
        out = os.path.join(d, "profile.json")
        py, me = shlex.quote(sys.executable), shlex.quote(__file__)
        inner = f"{py} {me} --child {shlex.quote(out)} --seconds {args.seconds:g}"
        inner += f" --interval {args.interval:g}" + (" --record" if args.record else "")
        cmd = f"cd {shlex.quote(str(ROOT))} && exec env TERM=xterm-256color {env} {inner}"
        started = time.monotonic()
        t = Tmux(f"sampler-profile-{os.getpid()}", "120x40", cmd)
        try:
            limit = LIVE_TIMEOUT_S + args.seconds * 2 + 60
            while not os.path.exists(out):
                if time.monotonic() - started > limit:
                    raise SystemExit(f"no profile within {limit:.0f} s:\n{t.screen()}")
                time.sleep(0.5)
        finally:
            t.close()
        report(out, args.top, args.interval)


if __name__ == "__main__":
    main()
