"""`gputop record` run from outside: its frames (to the end, or up to one a condition
accepts), what they say about the scheduler source, and a demo's frames."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tests.harness import ROOT, gputop_env, run_gputop


def frames_of(stdout: str) -> list[dict[str, Any]]:
    """The frames in `gputop record`'s output, one JSON object a line."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def record_frames(
    argv: list[str], env: dict[str, str] | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """The frames of ``argv`` (a `gputop record`) run to its end, which must be clean."""
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env or gputop_env(), cwd=ROOT, **kw
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return frames_of(r.stdout)


def record_until(
    argv: list[str], done: Callable[[dict[str, Any]], bool], env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """`gputop record` frames up to the first one ``done`` accepts (and two more), then SIGTERM.

    The probe compiles in a child at nice 19, which on a busy machine takes a while
    (that is the point: it only uses idle CPU), so tests wait for it, not for a clock.
    """
    p = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or gputop_env(),
        cwd=ROOT,
    )
    frames: list[dict[str, Any]] = []
    try:
        assert p.stdout is not None
        deadline = time.monotonic() + 150
        extra = None
        while time.monotonic() < deadline and (extra is None or extra > 0):
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if not ready:
                continue
            line = p.stdout.readline()
            if not line:
                break
            frames.append(json.loads(line))
            if extra is not None:
                extra -= 1
            elif done(frames[-1]):
                extra = 2
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Traceback" not in err, err
    return frames


def sched_note(frame: dict[str, Any]) -> str:
    """The frame's note about its scheduler source (``sched: ...``), or empty."""
    return next((n for n in frame["sources"]["notes"] if n.startswith("sched:")), "")


def probe_settled(frame: dict[str, Any]) -> bool:
    """The probe is live, or no longer compiling (it failed or was refused)."""
    return frame["sources"]["sched"] == "bpf" or "compiling" not in sched_note(frame)


def procfs_with_note(frames: list[dict[str, Any]], *words: str) -> None:
    """Every frame is from /proc, and the last one's scheduler note has all these words."""
    assert frames
    for f in frames:
        assert f["sources"]["sched"] == "procfs"
    notes = [n for n in frames[-1]["sources"]["notes"] if n.startswith("sched:")]
    assert notes, frames[-1]["sources"]
    for w in words:
        assert w in notes[0], notes[0]


def record_demo(
    name: str, interval: float, duration: float, bpf: bool = False
) -> list[dict[str, Any]]:
    """The frames of `gputop record --demo NAME` run to its end (``--no-bpf`` unless ``bpf``)."""
    r = run_gputop(
        *("record", "--demo", name, "--interval", str(interval), "--duration", str(duration)),
        *(() if bpf else ("--no-bpf",)),
        timeout=duration + 60,
    )
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def job_runq_shares(frames: list[dict[str, Any]], job: set[int]) -> dict[int, float]:
    """Each preemptor's share of a job's run-queue time over ``frames``, from the frames alone:
    the time each took summed over the job's processes and ticks, over the job's whole
    run-queue time (all threads); {} where the job never waited for a CPU."""
    took: dict[int, float] = {}
    total = 0.0
    for f in frames:
        for p in f["processes"]:
            if p["pid"] not in job or p.get("preemptors") is None or p["offcpu_pct"] is None:
                continue
            runq = p["runq_threads_pct"]
            total += runq
            for e in p["preemptors"]:
                took[e["pid"]] = took.get(e["pid"], 0.0) + runq * e["share_pct"] / 100.0
    return {pid: 100.0 * ns / total for pid, ns in took.items()} if total else {}
