"""Which SLURM job, step and task a process belongs to: its cgroup path, else its environment.

slurmd's cgroup plugins name the cgroups after the job, so ``/proc/PID/cgroup`` says it
without asking any daemon:

* cgroup v1 (``proctrack/cgroup``, ``task/cgroup``), under each controller it uses
  (freezer, cpuset, memory, devices, ...): ``/slurm/uid_<uid>/job_<job>/step_<step>/task_<t>``
  (``/slurm_<node>/...`` where slurmd runs several nodes on one host)
* cgroup v2 (``cgroup/v2``, 22.05 and later): ``/system.slice/slurmstepd.scope/job_<job>/
  step_<step>/user/task_<t>``; before 22.05 the v1 shape under the unified hierarchy

The step is a number or ``batch``, ``extern``, ``interactive``. Outside such cgroups (a
``proctrack/linuxproc`` site, a container) ``srun`` still puts ``SLURM_JOB_ID``,
``SLURM_STEP_ID`` and the task's ``SLURM_PROCID``/``SLURM_LOCALID`` in each task's
environment, which ``/proc/PID/environ`` shows as the task started.
"""

from __future__ import annotations

import re
from dataclasses import replace

from gputop.model.readings import SlurmIdentity

_STEP = r"step_(\d+|batch|extern|interactive)"
_V1 = re.compile(rf"/slurm(?:_[^/]+)?/uid_\d+/job_(\d+)/{_STEP}(?:/task_(\d+))?(?:/|$)")
_V2 = re.compile(rf"/slurmstepd\.scope/job_(\d+)/{_STEP}(?:/user/task_(\d+))?(?:/|$)")

_ENV_VARS = {
    b"SLURM_JOB_ID": "job",
    b"SLURM_JOBID": "job_old",
    b"SLURM_STEP_ID": "step",
    b"SLURM_STEPID": "step_old",
    b"SLURM_PROCID": "procid",
    b"SLURM_LOCALID": "localid",
    b"SLURM_NTASKS": "ntasks",
}


def slurm_from_path(path: str) -> SlurmIdentity | None:
    """The job, step and task named by one cgroup path; None for any other path."""
    for rx in (_V2, _V1):
        m = rx.search(path)
        if m:
            task = m.group(3)
            return SlurmIdentity(
                job_id=m.group(1), step_id=m.group(2), task_id=int(task) if task else None
            )
    return None


def slurm_from_cgroup(text: str) -> SlurmIdentity | None:
    """The job from ``/proc/PID/cgroup``: the first line (v2 or any v1 hierarchy) naming one.

    A process can sit in a job's cgroup under some controllers only (the plugins use a
    few), so every line is looked at, not only the first below the root.
    """
    for line in text.splitlines():
        ident = slurm_from_path(line.split(":", 2)[-1])
        if ident is not None:
            return ident
    return None


def read_environ(path: str, limit: int = 1 << 20) -> bytes | None:
    """A process's environment (up to ``limit`` bytes), or None where it is not readable."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.isdigit() else None


def slurm_from_environ(raw: bytes | None) -> SlurmIdentity | None:
    """The job from ``/proc/PID/environ`` (NUL-separated); None without ``SLURM_JOB_ID``."""
    if not raw:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        key = _ENV_VARS.get(name) if sep else None
        if key is not None:
            env[key] = value.decode("ascii", "replace")
    job = env.get("job") or env.get("job_old")
    if job is None or not job.isdigit():
        return None
    step = env.get("step") or env.get("step_old")
    return SlurmIdentity(
        job_id=job,
        step_id=step or None,
        task_id=_int(env.get("localid")),
        procid=_int(env.get("procid")),
        ntasks=_int(env.get("ntasks")),
    )


def slurm_of(cgroup_text: str, environ: bytes | None) -> SlurmIdentity | None:
    """The job from the cgroup path where it names one, else from the environment; the
    rank (``SLURM_PROCID`` of ``SLURM_NTASKS``) from the environment of that same job."""
    path = slurm_from_cgroup(cgroup_text)
    env = slurm_from_environ(environ)
    if path is None:
        return env
    if env is None or env.job_id != path.job_id:
        return path
    task = path.task_id if path.task_id is not None else env.task_id
    return replace(path, task_id=task, procid=env.procid, ntasks=env.ntasks)
