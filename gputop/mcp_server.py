"""`gputop mcp`: a Model Context Protocol server on the live sampler (docs/mcp.md).

The sampler runs on its own thread (``gputop.api.Monitor``) for the server's life and keeps
the frames of the last ``KEEP_MIN`` minutes; each tool answers from them. Every tool is
read-only except ``write_snapshot``, which writes one bundle (mode 0600) and returns its path:
nothing here renices, signals or kills. Bad arguments and unknown pids are tool errors (the
result's ``isError``), never a crash of the server.

Transports: stdio (the default, for agents that start the server themselves) or
streamable HTTP with ``--http HOST:PORT`` (127.0.0.1 by default, like the exporter).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import threading
import time
from collections import deque
from typing import Annotated, Any

from pydantic import Field

from gputop import __version__, api
from gputop.errors import UsageError

KEEP_MIN = 30.0
# How long a tool waits for the sampler's first frame after the server started.
FIRST_FRAME_WAIT_S = 15.0

INSTRUCTIONS = (
    "gputop watches this host's NVIDIA GPUs and the training jobs feeding them. Start with "
    "`verdicts` (per GPU: state such as busy_but_starving, its cause, evidence, fixes and the "
    "share of time lost); drill into a trainer with `process`; `top_culprits` says what held "
    "each GPU back over the last minutes. Nothing here changes the host except "
    "`write_snapshot`, which writes one JSON bundle."
)


class Live:
    """The sampler on its thread and the frames of the last ``keep_min`` minutes."""

    def __init__(self, monitor: api.Monitor, keep_min: float = KEEP_MIN) -> None:
        self.monitor = monitor
        self.keep_s = keep_min * 60.0
        self._frames: deque[api.Frame] = deque()
        self._cond = threading.Condition()

    def start(self) -> None:
        self.monitor.start(self._add)

    def _add(self, frame: api.Frame) -> None:
        with self._cond:
            self._frames.append(frame)
            while self._frames and frame.t - self._frames[0].t > self.keep_s:
                self._frames.popleft()
            self._cond.notify_all()

    def latest(self) -> api.Frame:
        """The newest frame, waiting a while for the first one."""
        deadline = time.monotonic() + FIRST_FRAME_WAIT_S
        with self._cond:
            while not self._frames:
                left = deadline - time.monotonic()
                if left <= 0 or self.monitor.error is not None:
                    break
                self._cond.wait(min(left, 0.5))
            if not self._frames:
                why = self.monitor.error
                raise _error("no frame yet" + (f": the sampler stopped ({why!r})" if why else ""))
            return self._frames[-1]

    def window(self, minutes: float) -> list[api.Frame]:
        """The frames of the last ``minutes`` minutes, oldest first (at least the newest)."""
        last = self.latest()
        with self._cond:
            return [f for f in self._frames if last.t - f.t <= minutes * 60.0 + 1e-6]


def _error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def _num(v: float | None, digits: int = 1) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, digits)


def verdict_dict(frame: api.Frame, v: api.Verdict) -> dict[str, Any]:
    """One GPU's verdict as the tools return it."""
    gpu = next((g for g in frame.gpus if g.index == v.gpu), None)
    return {
        "gpu": v.gpu,
        "name": gpu.name if gpu else None,
        "util": gpu.util if gpu else None,
        "sm_active": gpu.sm_active if gpu else None,
        "state": v.state,
        "cause": v.cause,
        "lost_pct": _num(v.lost_pct),
        "speedup_max": _num(v.speedup_max, 2),
        "trainer_pid": v.lost_pid,
        "evidence": list(v.evidence),
        "fixes": list(v.fixes),
        "lost_gpu_s": dict(gpu.lost_gpu_s or {}) if gpu else {},
    }


def _verdicts(frame: api.Frame) -> dict[str, Any]:
    return {
        "t": round(frame.t, 3),
        "sources": {
            "gpu": frame.sources.gpu,
            "sched": frame.sources.sched,
            "notes": list(frame.sources.notes),
        },
        "verdicts": [verdict_dict(frame, v) for v in frame.verdicts],
    }


def process_dict(frame: api.Frame, pid: int) -> dict[str, Any]:
    """One process's drill-down as the ``process`` tool returns it."""
    try:
        r = api.process(frame, pid)
    except LookupError:
        raise _error(
            f"no process {pid} in gputop's latest frame (it shows jobs, GPU users "
            "and the busiest processes)"
        ) from None
    limit = r.cpu_limit
    return {
        "pid": r.pid,
        "comm": r.comm,
        "cmdline": r.cmdline,
        "role": r.role,
        "trainer_pid": r.trainer_pid,
        "gpus": list(r.gpus),
        "cpu_pct": _num(r.cpu_pct),
        "verdict": None
        if r.verdict is None
        else {"gpu": r.verdict.gpu, "state": r.verdict.state, "cause": r.verdict.cause},
        "time_split": r.time_split,
        "time_split_measured": r.time_split_measured,
        "lost_pct": _num(r.lost_pct),
        "speedup_max": _num(r.speedup_max, 2),
        "lost_split": r.lost_split,
        "preemptors": None
        if r.preemptors is None
        else [
            {"pid": q.pid, "comm": q.comm, "share_pct": _num(q.share_pct), "kernel": q.kernel}
            for q in r.preemptors
        ],
        "cpu_limit": None
        if limit is None
        else {
            "cgroup": limit.cgroup,
            "cpus": r.sample.cpu_quota,
            "file": limit.file,
            "throttled_pct": _num(r.cpu_throttled_pct),
        },
        "storage": None
        if r.storage is None
        else [{"mount": s.mount, "fstype": s.fstype, "source": s.source} for s in r.storage],
        "job_id": r.job_id,
        "rank": r.rank,
        "world_size": r.world_size,
        "slurm_job_id": r.slurm_job_id,
        "slurm_step_id": r.slurm_step_id,
        "container_id": r.container_id,
        "pod": r.pod,
        "workers": [
            {"pid": p.pid, "role": p.role, "cpu_pct": _num(p.cpu_pct)}
            for p in frame.processes
            if p.trainer_pid == pid and p.pid != pid
        ],
    }


def culprits_dict(frames: list[api.Frame], minutes: float, limit: int) -> dict[str, Any]:
    """What held each GPU back over the frames, as ``top_culprits`` returns it."""
    return {
        "minutes": minutes,
        "frames": len(frames),
        "seconds": round(frames[-1].t - frames[0].t + frames[0].interval, 1),
        "gpus": [
            {
                "gpu": c.gpu,
                "lost_s": c.lost_s,
                "states": c.states,
                "processes": [
                    {
                        "pid": p.pid,
                        "comm": p.comm,
                        "cpu_pct": _num(p.cpu_pct),
                        "share_pct": _num(p.share_pct),
                        "measured": p.share_pct is not None,
                    }
                    for p in c.processes[:limit]
                ],
            }
            for c in api.culprits(frames)
        ],
    }


def bundle_dict(path: str) -> dict[str, Any]:
    """A snapshot bundle's summary, as ``read_bundle`` returns it."""
    try:
        b = api.load_bundle(path)
    except api.UsageError as exc:
        raise _error(str(exc)) from None
    last = b.frames[-1]
    return {
        "path": b.path,
        "created_t": b.created_t,
        "frames": len(b.frames),
        "seconds": round(last.t - b.frames[0].t + b.frames[0].interval, 1),
        "redacted": b.redacted,
        "host": b.meta.get("host"),
        **_verdicts(last),
        "top_culprits": culprits_dict(b.frames, KEEP_MIN, 5)["gpus"],
    }


def build_server(live: Live) -> Any:
    """The MCP server with gputop's tools, answering from ``live``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer(
        "gputop", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    ro = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=ro)
    def verdicts() -> dict[str, Any]:
        """Each GPU's verdict now: state (ok, busy_but_starving, input_bound, host_bound,
        throttled, idle, ...), its cause, evidence with numbers, fixes, the share of time
        lost (lost_pct) and the GPU seconds lost by cause since gputop started."""
        return _verdicts(live.latest())

    @server.tool(annotations=ro)
    def process(pid: Annotated[int, Field(gt=0, description="a process id")]) -> dict[str, Any]:
        """One process's drill-down: where its main thread's time went, who took its CPU
        (preemptors and their shares), its CPU limit, the storage it reads, its rank and
        job, its DataLoader workers, and what its GPU's verdict cost."""
        return process_dict(live.latest(), pid)

    @server.tool(annotations=ro)
    def top_culprits(
        minutes: Annotated[float, Field(gt=0, le=KEEP_MIN, description="look back")] = 5.0,
        limit: Annotated[int, Field(ge=1, le=50, description="processes per GPU")] = 10,
    ) -> dict[str, Any]:
        """Per GPU over the last N minutes: GPU seconds lost by cause, how often each
        verdict held, and the processes outside the job that took its CPU, worst first."""
        return culprits_dict(live.window(minutes), minutes, limit)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def write_snapshot(
        minutes: Annotated[float, Field(gt=0, le=KEEP_MIN, description="look back")] = 5.0,
    ) -> dict[str, Any]:
        """Write the last N minutes as one snapshot bundle (JSON, mode 0600, secrets in
        command lines redacted) in gputop's snapshot directory; returns its path."""
        frames = live.window(minutes)
        try:
            path = api.write_snapshot(frames, live.monitor.statuses())
        except api.UsageError as exc:
            raise _error(str(exc)) from None
        return {"path": path, "frames": len(frames)}

    @server.tool(annotations=ro)
    def read_bundle(
        path: Annotated[str, Field(min_length=1, description="a snapshot bundle's path")],
    ) -> dict[str, Any]:
        """Read a snapshot bundle: its window, the last frame's verdicts and the top
        culprits over it."""
        return bundle_dict(path)

    return server


def mcp_command(args: argparse.Namespace, opts: api.Options) -> int:
    """`gputop mcp`: serve until the client closes stdin (or a signal, over HTTP)."""
    http = getattr(args, "http", None)
    where: tuple[str, int] | None = None
    if http is not None:
        from gputop.export import parse_listen

        try:
            where = parse_listen(http)
        except UsageError as exc:
            # The exporter's rules for an address, told under this command's option.
            raise UsageError(str(exc).replace("--listen", "--http", 1)) from None
    # Every process on the host is in each frame (as in the TUI), so any pid has a drill-down.
    monitor = api.Monitor(dataclasses.replace(opts, list_all=True))
    live = Live(monitor)
    server = build_server(live)
    try:
        live.start()
        if where is None:
            server.run("stdio")
        else:
            print(f"gputop mcp: serving http://{where[0]}:{where[1]}/mcp", file=sys.stderr)
            server.run("streamable-http", host=where[0], port=where[1])
    finally:
        monitor.close()
    if monitor.error is not None:
        print(f"gputop mcp: sampler stopped: {monitor.error!r}", file=sys.stderr)
        return 1
    return 0
