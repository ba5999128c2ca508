"""SLURM jobs from cgroup files (v1 hybrid and v2 as slurmd writes them) and environments,
read through the /proc source from a /proc-shaped directory; the TUI's text and filter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gputop.sources.cgroup import ContainerTagger
from gputop.sources.slurm import slurm_from_cgroup, slurm_from_environ, slurm_of
from gputop.widgets.table_layout import arrange, pod_text
from tests.exportutil import scrape_collector
from tests.fakeproc import FakeProc, FakeProcTree
from tests.frames_fixture import make_frame

# /proc/PID/cgroup of a task on a cgroup v1 node (proctrack/cgroup + task/cgroup: freezer,
# cpuset, memory, devices; cpu,cpuacct untouched) and on a cgroup v2 node (22.05+), and
# on a v2 node with the older layout under the unified hierarchy.
V1_HYBRID = (
    "12:pids:/user.slice/user-1000.slice/session-4.scope\n"
    "11:freezer:/slurm/uid_1000/job_77/step_0/task_1\n"
    "7:memory:/slurm/uid_1000/job_77/step_0/task_1\n"
    "4:cpu,cpuacct:/\n"
    "1:name=systemd:/system.slice/slurmd.service\n"
    "0::/system.slice/slurmd.service\n"
)
V2 = "0::/system.slice/slurmstepd.scope/job_4242/step_3/user/task_0\n"
V2_BATCH = "0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0\n"
V2_OLD = "0::/slurm/uid_0/job_12/step_extern\n"
SRUN_ENV = (
    b"PATH=/usr/bin\0SLURM_JOB_ID=4242\0SLURM_STEP_ID=3\0SLURM_PROCID=5\0"
    b"SLURM_LOCALID=1\0SLURM_NTASKS=8\0SLURM_JOB_NAME=train\0"
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (V1_HYBRID, ("77", "0", 1)),
        (V2, ("4242", "3", 0)),
        (V2_BATCH, ("4242", "batch", 0)),
        (V2_OLD, ("12", "extern", None)),
        ("5:memory:/slurm_node3/uid_0/job_8/step_interactive\n0::/\n", ("8", "interactive", None)),
    ],
)
def test_job_step_and_task_from_each_cgroup_layout(
    text: str, want: tuple[str, str, int | None]
) -> None:
    ident = slurm_from_cgroup(text)
    assert ident is not None
    assert (ident.job_id, ident.step_id, ident.task_id) == want


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-0.slice/session-3.scope\n",
        "0::/system.slice/slurmd.service\n",
        "4:memory:/slurm/uid_0/job_x/step_0\n",  # not a job number
        "4:memory:/myslurm/job_1/step_0\n",
        "",
    ],
)
def test_no_job_outside_slurms_cgroups(text: str) -> None:
    assert slurm_from_cgroup(text) is None


def test_job_and_rank_from_the_environment_srun_gives_a_task() -> None:
    ident = slurm_from_environ(SRUN_ENV)
    assert ident is not None
    assert (ident.job_id, ident.step_id, ident.procid, ident.task_id, ident.ntasks) == (
        "4242",
        "3",
        5,
        1,
        8,
    )
    # sbatch's old names; a batch script's environment has no step.
    old = slurm_from_environ(b"SLURM_JOBID=9\0SLURM_STEPID=1\0")
    assert old is not None and (old.job_id, old.step_id) == ("9", "1")
    assert slurm_from_environ(b"SLURM_JOB_ID=9\0") == replace(old, step_id=None)
    for raw in (None, b"", b"SLURM_JOB_ID=\0", b"SLURM_JOB_ID=abc\0", b"HOME=/root\0"):
        assert slurm_from_environ(raw) is None


def test_the_cgroup_names_the_job_and_the_same_jobs_environment_its_rank() -> None:
    both = slurm_of(V2, SRUN_ENV)
    assert both is not None
    assert (both.job_id, both.step_id, both.task_id, both.procid, both.ntasks) == (
        "4242",
        "3",
        0,
        5,
        8,
    )
    # A different job in the environment (a shell inherited it) does not lend its rank.
    other = slurm_of(V1_HYBRID, SRUN_ENV)
    assert other is not None and (other.job_id, other.procid) == ("77", None)
    env_only = slurm_of("0::/\n", SRUN_ENV)
    assert env_only is not None and env_only.job_id == "4242"


def test_the_proc_source_reads_each_processs_job_from_its_files(tmp_path: Path) -> None:
    tree = FakeProcTree(tmp_path / "proc")
    files = {101: (V2, b""), 102: (V1_HYBRID, b""), 103: ("0::/\n", SRUN_ENV), 104: ("0::/\n", b"")}
    for pid, (cgroup, environ) in files.items():
        tree.write(FakeProc(pid, ticks=10))
        (tree.root / str(pid) / "cgroup").write_text(cgroup)
        (tree.root / str(pid) / "environ").write_bytes(environ)
    src = ContainerTagger(proc_root=str(tree.root))
    scan = src.scan(1.0)
    details = src.details(dict.fromkeys(files, False), scan)
    got = {}
    for pid, d in details.items():
        s = d.identity.slurm if d.identity is not None else None
        got[pid] = None if s is None else (s.job_id, s.step_id)
    assert got == {101: ("4242", "3"), 102: ("77", "0"), 103: ("4242", "3"), 104: None}


def test_the_table_shows_and_filters_by_slurm_job() -> None:
    procs = list(make_frame(0).processes)
    procs[0] = replace(procs[0], slurm_job_id="4242", slurm_step_id="3")
    procs[1] = replace(procs[1], slurm_job_id="77", slurm_step_id=None)
    assert pod_text(procs[0]) == "slurm 4242.3" and pod_text(procs[1]) == "slurm 77"
    assert pod_text(procs[2]) == ""
    assert [p.pid for p, _ in arrange(procs, needle="slurm 4242")] == [procs[0].pid]
    assert [p.pid for p, _ in arrange(procs, needle="SLURM 77")] == [procs[1].pid]
    # A pod names where it runs first.
    in_pod = replace(procs[0], pod_name="train", pod_namespace="ml")
    assert pod_text(in_pod) == "ml/train"


def test_the_exporters_process_series_carry_the_job_and_step() -> None:
    frame = make_frame(0)
    procs = list(frame.processes)
    procs[0] = replace(procs[0], slurm_job_id="4242", slurm_step_id="3")
    fams = scrape_collector(replace(frame, processes=tuple(procs)))
    labels = {s.labels["pid"]: s.labels for s in fams["gputop_process_cpu_percent"]}
    assert (
        labels[str(procs[0].pid)]["slurm_job_id"],
        labels[str(procs[0].pid)]["slurm_step_id"],
    ) == (
        "4242",
        "3",
    )
    assert labels[str(procs[1].pid)]["slurm_job_id"] == ""
