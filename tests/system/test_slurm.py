"""Real processes in SLURM-shaped cgroups (v1 and the hybrid host's unified v2 hierarchy)
and with the environment `srun` gives its tasks: `gputop record` names their job and step,
groups the srun-launched ranks, and the TUI shows, filters and drills into the job.

The cgroups are made under a fresh parent per test (SLURM's shape below it, as a node's
slurmd would make it) and removed after; the processes are the fake NVML's GPU processes,
so each is shown in detail."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.screens.process import ProcessScreen
from gputop.widgets.table_layout import row_key
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import run_gputop

V1_ROOT = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup/unified")
SLEEP = "import time; time.sleep(120)"


@contextlib.contextmanager
def cgroup(root: Path, rel: str) -> Iterator[Path]:
    """``root/<fresh parent>/rel``, made for the test and removed after (empty by then)."""
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        pytest.skip(f"needs root and a writable cgroup hierarchy at {root}")
    top = root / f"gputop-test-{uuid.uuid4().hex[:8]}"
    leaf = top / rel
    leaf.mkdir(parents=True)
    try:
        yield leaf
    finally:
        d = leaf
        while True:
            for _ in range(50):  # a killed process leaves its cgroup a moment later
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
            if d == top:
                break
            d = d.parent


@contextlib.contextmanager
def started(
    leaf: Path | None = None, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A sleeping Python process, in cgroup ``leaf`` from its first instruction (the shell
    moves itself there, then execs), with ``env`` added to its environment."""
    code = f"exec {sys.executable} -c '{SLEEP}'"
    if leaf is not None:
        code = f"echo $$ > {leaf}/cgroup.procs && {code}"
    p = subprocess.Popen(["sh", "-c", code], env={**os.environ, **(env or {})})
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _srun(procid: int) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid),
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NAME": "train",
    }


def _record(tmp_path: Path, pids: list[int]) -> list[Frame]:
    fake = FakeNvml(
        tmp_path / "nvml",
        [FakeGpu(util=[90], processes=[FakeProc(pid=pid, mem_mib=1000)]) for pid in pids],
    )
    r = run_gputop(
        *("record", "--no-bpf", "--interval", "0.3", "--duration", "1"),
        env=fake.env(),
        check=True,
    )
    frames = [Frame.from_dict(json.loads(line)) for line in r.stdout.splitlines()]
    assert frames, r.stderr
    return frames


def test_slurm_jobs_from_cgroups_and_environments_in_record_and_the_tui(
    tmp_path: Path,
) -> None:
    with (
        cgroup(V1_ROOT, "slurm/uid_0/job_123/step_0/task_0") as v1,
        cgroup(V2_ROOT, "system.slice/slurmstepd.scope/job_124/step_batch/user/task_0") as v2,
        started(v1) as a,
        started(v2) as b,
        started(env=_srun(0)) as r0,
        started(env=_srun(1)) as r1,
        started() as plain,
    ):
        frames = _record(tmp_path, [a.pid, b.pid, r0.pid, r1.pid, plain.pid])
        assert "/slurm/uid_0/job_123/step_0/task_0" in Path(f"/proc/{a.pid}/cgroup").read_text()

    by_pid = {p.pid: p for p in frames[-1].processes}
    assert (by_pid[a.pid].slurm_job_id, by_pid[a.pid].slurm_step_id) == ("123", "0")
    assert (by_pid[b.pid].slurm_job_id, by_pid[b.pid].slurm_step_id) == ("124", "batch")
    assert (by_pid[plain.pid].slurm_job_id, by_pid[plain.pid].slurm_step_id) == (None, None)
    # The srun-launched ranks: one job, rank of world size, their local ids.
    for rank, p in enumerate((r0, r1)):
        row = by_pid[p.pid]
        assert (row.slurm_job_id, row.slurm_step_id) == ("4242", "0")
        assert row.role == "trainer"
        assert (row.job_id, row.rank, row.world_size, row.local_rank) == (
            "slurm-4242.0",
            rank,
            2,
            rank,
        )
    # A lone process in a job's cgroup is no rank of a distributed job.
    assert by_pid[a.pid].job_id is None and by_pid[a.pid].rank is None

    # The JSON objects carry them as the contract names them.
    raw = frames[-1].to_dict()["processes"]
    assert {p["pid"]: p["slurm_job_id"] for p in raw}[r1.pid] == "4242"

    asyncio.run(_tui(frames, a.pid, r1.pid))


async def _tui(frames: list[Frame], in_cgroup: int, rank: int) -> None:
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.table
        last = {p.pid: p for p in frames[-1].processes}
        assert "POD/CONTAINER" in table.render_line(0).text
        assert table.cells(row_key(last[in_cgroup]))["pod"] == "slurm 123.0"
        assert table.cells(row_key(last[rank]))["pod"] == "slurm 4242.0"
        await pilot.press("slash", *"slurm 4242", "enter")
        await pilot.pause()
        shown = sorted(int(k.split(":")[0]) for k in table.order)
        assert shown == sorted(p.pid for p in last.values() if p.slurm_job_id == "4242")
        assert len(shown) == 2
        assert table.select_key(row_key(last[rank]))
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        head = str(screen.query_one("#head").render())
        assert "SLURM job 4242 step 0" in head and "rank 1 of 2" in head, head
