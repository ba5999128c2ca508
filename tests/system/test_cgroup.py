"""Container and pod identity from real cgroups (as root): cgroup v2 directories made here,
named as docker, containerd/CRI-O under the kubelet and the cgroupfs drivers name them, with
a real trainer and its DataLoader-named worker moved into each."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputop.export import FrameCollector
from gputop.sampler import HostPass, Sampler
from gputop.sources.cgroup import ContainerTagger, cgroup_path
from tests.cgrouputil import CID, LAYOUTS, POD_UID


def _cgroup2_root() -> str | None:
    with open("/proc/self/mounts") as fh:
        for line in fh:
            parts = line.split()
            if parts[2] == "cgroup2":
                return parts[1]
    return None


ROOT2 = _cgroup2_root()
needs_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or ROOT2 is None, reason="needs root and a cgroup v2 hierarchy"
)


TRAINER = r"""
import os, sys, time
child = os.fork()
if child == 0:
    with open("/proc/self/comm", "w") as f:
        f.write("pt_data_worker")
    time.sleep(120)
    os._exit(0)
print(child, flush=True)
time.sleep(120)
"""


@pytest.fixture
def parent_cgroup() -> Iterator[Path]:
    assert ROOT2 is not None
    parent = Path(ROOT2) / f"gputop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    parent.mkdir()
    yield parent
    # Leaves first; a cgroup can only go once it holds no process.
    for d in sorted((p for p in parent.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        d.rmdir()
    parent.rmdir()


@needs_cgroups
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_processes_moved_into_real_cgroups_carry_their_container_and_pod(
    layout: str, parent_cgroup: Path, tmp_path: Path
) -> None:
    path, runtime, pod = LAYOUTS[layout]
    cg = parent_cgroup / path
    cg.mkdir(parents=True)
    logs = tmp_path / "pods"
    (logs / f"ml-team_resnet-train-7f9c_{POD_UID}").mkdir(parents=True)
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER], stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout is not None
        worker = int(trainer.stdout.readline())
        for pid in (trainer.pid, worker):
            (cg / "cgroup.procs").write_text(str(pid))
        with open(f"/proc/{trainer.pid}/cgroup") as fh:
            assert cgroup_path(fh.read()) == "/" + str(cg.relative_to(ROOT2 or "/"))
        deadline = time.monotonic() + 20
        while not Path(f"/proc/{worker}/comm").read_text().startswith("pt_data_worker"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        src = HostPass(ContainerTagger(pod_log_root=str(logs)), top_n=100_000)
        sampler = Sampler(procs=src, interval_s=0.2)
        sampler.tick()
        time.sleep(0.2)
        frame = sampler.tick()
        sampler.close()
    finally:
        trainer.kill()
        trainer.wait()
        # The forked worker is the trainer's child: gone with it; wait for its exit.
        deadline = time.monotonic() + 10
        while (cg / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            for pid in (cg / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
    by_pid = {p.pid: p for p in frame.processes}
    t, w = by_pid[trainer.pid], by_pid[worker]
    assert (t.role, w.role, w.trainer_pid) == ("trainer", "dataloader", trainer.pid)
    for p in (t, w):
        assert (p.container_id, p.container_runtime, p.pod_uid) == (CID, runtime, pod)
        if pod is not None:
            assert (p.pod_namespace, p.pod_name) == ("ml-team", "resnet-train-7f9c")
        else:
            assert (p.pod_namespace, p.pod_name) == (None, None)
    # A process outside any container (this test) has no identity.
    me = by_pid.get(os.getpid())
    assert me is None or me.container_id is None
    # The identity reaches the Prometheus labels of exported processes.
    collector = FrameCollector("node-1")
    collector.update(frame)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    cpu = next(
        f
        for f in text_string_to_metric_families(generate_latest(reg).decode())
        if f.name == "gputop_process_cpu_percent"
    )
    labels = next(s.labels for s in cpu.samples if s.labels["pid"] == str(trainer.pid))
    assert labels["container_id"] == CID
    assert labels["pod"] == ("resnet-train-7f9c" if pod else "")
    assert labels["namespace"] == ("ml-team" if pod else "")
