"""A distributed job's ranks in their own PID and mount namespace, as in a container (issue 36):
`gputop record` on the host reads them through the host's /proc (their environ, as root)
and names each by its host PID, its job and its rank."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import run_gputop


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _ranks_of(run_id: str) -> dict[int, int]:
    """Host PID -> RANK of each live process whose environment holds this run id."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        env = dict(v.split(b"=", 1) for v in _environ(int(name)).split(b"\0") if b"=" in v)
        if env.get(b"TORCHELASTIC_RUN_ID") == run_id.encode() and b"RANK" in env:
            out[int(name)] = int(env[b"RANK"])
    return out


def _nspids(pid: int) -> list[int]:
    """The process's PID in each namespace it is in, the host's first (status's NSpid)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return [pid]


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_ranks_in_their_own_pid_namespace_are_named_by_host_pid_job_and_rank(
    tmp_path: Path,
) -> None:
    run_id = f"ns-job-{uuid.uuid4().hex[:12]}"
    rank = f"{sys.executable} -c 'import time; time.sleep(60)'"
    job = " & ".join(
        f"RANK={r} LOCAL_RANK={r} WORLD_SIZE=2 TORCHELASTIC_RUN_ID={run_id} exec {rank}"
        for r in (0, 1)
    )
    # Both ranks in ONE new PID namespace (sh is its PID 1) with its own /proc mount.
    ns = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", f"{job} & wait"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        ranks = _ranks_of(run_id)
        while len(ranks) < 2 and ns.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            ranks = _ranks_of(run_id)
        if ns.poll() is not None:
            err = ns.stderr.read().decode() if ns.stderr else ""
            pytest.skip(f"unshare refused here: {err.strip()}")
        assert sorted(ranks.values()) == [0, 1], ranks
        host_pid = {r: pid for pid, r in ranks.items()}
        for pid in ranks:
            # the premise: a PID of its own namespace, unlike the host's
            nspid = _nspids(pid)
            assert len(nspid) == 2 and nspid[0] == pid and nspid[1] != pid, nspid
        fake = FakeNvml(
            tmp_path,
            [
                FakeGpu(util=[90], processes=[FakeProc(pid=host_pid[r], mem_mib=1000 + r)])
                for r in (0, 1)
            ],
        )
        out = run_gputop(
            *("record", "--no-bpf", "--duration", "1.5", "--interval", "0.3"), env=fake.env()
        )
        assert out.returncode == 0, out.stderr
        last = json.loads(out.stdout.splitlines()[-1])
        procs = {p["pid"]: p for p in last["processes"]}
        for r in (0, 1):
            p = procs.get(host_pid[r])
            assert p is not None, (r, host_pid[r], sorted(procs))
            assert p["role"] == "trainer", p
            assert p["gpus"] == [r] and p["gpu_mem_mib"] == 1000 + r, p
            assert (p.get("job_id"), p.get("rank"), p.get("world_size"), p.get("local_rank")) == (
                run_id,
                r,
                2,
                r,
            ), p
        # Only the PID namespace differs: the same cgroup, so the same container identity.
        r0, r1 = procs[host_pid[0]], procs[host_pid[1]]
        assert r0.get("container_id") == r1.get("container_id"), (r0, r1)
        # The recorder itself runs on the host: nothing says GPU PIDs are hidden from it.
        assert "own PID namespace" not in " ".join(last["sources"]["notes"])
    finally:
        if ns.poll() is None:
            os.killpg(ns.pid, signal.SIGKILL)
        ns.wait()
        if ns.stderr:
            ns.stderr.close()
        # --kill-child: the namespace's PID 1 dies with unshare, and the kernel ends the rest
        deadline = time.monotonic() + 5
        while _ranks_of(run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _ranks_of(run_id), "ranks outlived their namespace"
