"""Synthetic frames of process churn at 0.25 s: long-lived processes, three new PIDs every
frame that live two frames, a process that execs (same key, new name), a PID reused by a
new process every 50 frames, and a process that drops in and out of the frames.

Who is in frame ``i`` follows from ``i`` alone."""

from __future__ import annotations

from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    ProcessSample,
    Sources,
    ThreadSample,
    Verdict,
)
from gputop.model.history import History

T0 = 1_700_000_000.0
INTERVAL_S = 0.25
WINDOW_S = 60.0  # 240 frames at 0.25 s
KEEP_S = 10.0  # 40 frames
LONG_PIDS = (100, 101, 102, 103, 104)
BIRTHS_PER_FRAME = 3
LIFETIME_FRAMES = 2
EXEC_PID, REUSED_PID, REUSE_EVERY, FLICKER_PID = 200, 300, 50, 400


def proc(pid: int, start: int, i: int, comm: str = "sh", **kw: object) -> ProcessSample:
    """Process ``pid`` (started at ``start``) as frame ``i`` sees it."""
    fields: dict[str, object] = {
        "pid": pid,
        "ppid": 1,
        "comm": comm,
        "cmdline": f"{comm} --job {pid}",
        "role": "other",
        "trainer_pid": None,
        "cpu_pct": float(pid % 7 + i % 11),
        "offcpu_pct": float(i % 90),
        "runq_pct": float(i % 30),
        "preempt_per_s": 1.5,
        "preempt_total": 1000 + i,
        "vcsw_per_s": 2.0,
        "start_time": start,
    }
    fields.update(kw)
    return ProcessSample(**fields)  # type: ignore[arg-type]


def churn_frame(i: int) -> Frame:
    """Frame number ``i``: who is in it follows from ``i`` alone."""
    procs = [
        proc(
            pid,
            1,
            i,
            "python3",
            role="trainer" if pid == 100 else "other",
            trainer_pid=100 if pid == 100 else None,
            wait_input_pct=float(i % 20),
            wait_irq_pct=1.0,
            wait_thread_pct=0.5,
            wait_other_pct=None,
            threads=(ThreadSample(pid, "python3", 50.0, 40.0, 10.0, 3.0, 4.0),),
        )
        for pid in LONG_PIDS
    ]
    procs.append(proc(EXEC_PID, 1, i, "sh" if (i // 100) % 2 == 0 else "make"))
    procs.append(proc(REUSED_PID, 10 + i // REUSE_EVERY, i))
    if i % 97 < 5:
        procs.append(proc(FLICKER_PID, 1, i))
    for born in range(max(0, i - LIFETIME_FRAMES + 1), i + 1):
        for k in range(BIRTHS_PER_FRAME):
            procs.append(proc(10_000 + BIRTHS_PER_FRAME * born + k, 100 + born, i))
    state = "busy_but_starving" if (i // 60) % 2 else "ok"
    return Frame(
        t=T0 + i * INTERVAL_S,
        interval=INTERVAL_S,
        seq=i + 1,
        sources=Sources(gpu="demo", sched="bpf"),
        host=HostSample(cpu_pct=50.0, ncpu=2, load1=1.0),
        gpus=(GpuSample(0, "GPU-0", "demo", float(i % 100), 10.0, 100.0, 700.0, 1000, 80000),),
        processes=tuple(procs),
        verdicts=(Verdict(gpu=0, state=state, evidence=(f"tick {i}",)),),
    )


def churned(frames: int) -> History:
    """A history (60 s window, departed kept 10 s) fed the first ``frames`` churn frames."""
    h = History(WINDOW_S, INTERVAL_S, keep_departed_s=KEEP_S)
    for i in range(frames):
        h.add(churn_frame(i))
    return h
