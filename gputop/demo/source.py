"""DemoGpuSource: a GpuSource whose GPU is modelled from a real host workload's progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

import gputop
from gputop.demo import cgroup as demo_cgroup
from gputop.demo import cudastub
from gputop.demo import storage as demo_storage
from gputop.demo.gpumodel import GpuSpec, model_node
from gputop.demo.progress import SIZE, Progress, ProgressPage
from gputop.demo.scenarios import DEMO_CPUS, Scenario
from gputop.errors import UsageError
from gputop.model.frame import GpuReading, SourceStatus

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 3.0


class DemoGpuSource:
    """Starts the scenario's workload on ``open`` and reports its modelled GPUs (one per rank:
    GPU ``r`` runs rank ``r``'s trainer, driven by that rank's progress).

    The workload runs in its own process group; ``close`` asks its launcher to
    tear it down, kills the group if that takes too long, and reaps the launcher.
    """

    def __init__(self, scenario: Scenario, spec: GpuSpec | None = None, probe: bool = True) -> None:
        self.scenario = scenario
        self.spec = spec or GpuSpec()
        self._status = SourceStatus("gpu", "demo", True, None)
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None
        self._pages: list[ProgressPage] = []
        self._errors: IO[bytes] | None = None
        self._prev: tuple[int, list[Progress]] | None = None
        self._cgroup: str | None = None
        self._io_cgroup: str | None = None
        # Said before anything starts: without what it needs the demo cannot run at all.
        if scenario.cpu_limit is not None:
            demo_cgroup.cpu_controller()
        if scenario.read_iops is not None:
            demo_storage.io_controller()
        if scenario.needs_probe and not probe:
            raise UsageError(
                f"the {scenario.name} demo's verdict rests on the eBPF probe's measurements:"
                " run it without --no-bpf"
            )
        if scenario.needs_probe and os.geteuid() != 0:
            raise UsageError(
                f"the {scenario.name} demo needs root: its verdict rests on the eBPF probe's"
                " measurements"
            )
        if scenario.cuda_stand_in:
            cudastub.compiler()
        if scenario.ranks > min(DEMO_CPUS, len(os.sched_getaffinity(0))):
            raise UsageError(f"the {scenario.name} demo needs {scenario.ranks} CPUs (one per rank)")

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def workload_pid(self) -> int | None:
        """The launcher's pid (also the workload's process group), while running."""
        return None if self._proc is None else self._proc.pid

    def open(self) -> None:
        """Start the workload and wait until its first step has run."""
        if self._proc is not None:
            return
        self._fd = os.memfd_create("gputop-demo", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, SIZE * self.scenario.ranks)
        self._pages = [ProgressPage(self._fd, r) for r in range(self.scenario.ranks)]
        self._errors = tempfile.TemporaryFile()
        root = os.path.dirname(os.path.dirname(os.path.abspath(gputop.__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        argv = [
            sys.executable,
            "-m",
            "gputop.demo.workload",
            "--scenario",
            self.scenario.name,
            "--shm-fd",
            str(self._fd),
            "--parent",
            str(os.getpid()),
        ]
        if self.scenario.cpu_limit is not None:
            self._cgroup = demo_cgroup.make_cpu_limit(self.scenario.cpu_limit)
            argv += ["--cgroup", self._cgroup]
        if self.scenario.read_iops is not None:
            self._io_cgroup = demo_storage.cgroup_path(os.getpid())
            argv += ["--io-cgroup", self._io_cgroup]
        if self.scenario.cuda_stand_in:
            argv += ["--cuda-lib", str(cudastub.build())]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._errors,
            pass_fds=(self._fd,),
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            now = time.monotonic_ns()
            ps = [page.read() for page in self._pages]
            if all(p.ready for p in ps):
                self._prev = (now, ps)
                return
            self._check_alive()
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"demo workload did not start within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.01)

    def _check_alive(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        why = ""
        if self._errors is not None:
            self._errors.seek(0)
            lines = self._errors.read().decode("utf-8", "replace").strip().splitlines()
            why = f": {lines[-1]}" if lines else ""
        rc = proc.returncode
        self.close()
        raise RuntimeError(f"demo workload exited with status {rc}{why}")

    def read(self) -> GpuReading:
        """The modelled GPUs over the time since the previous read."""
        if not self._pages or self._prev is None:
            raise RuntimeError("demo GPU source is not open")
        self._check_alive()
        now = (time.monotonic_ns(), [page.read() for page in self._pages])
        then, self._prev = self._prev, now
        return model_node(self.spec, self.scenario.profile, then, now)

    def close(self) -> None:
        """Stop the workload and release everything; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_group(proc)
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None:
            # The launcher removes it after its tree; this is for a launcher that could not.
            demo_cgroup.remove(cgroup)
        io_cgroup, self._io_cgroup = self._io_cgroup, None
        if io_cgroup is not None and os.path.isdir(io_cgroup):
            demo_storage.remove(io_cgroup)
        for page in self._pages:
            page.close()
        self._pages = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._errors is not None:
            self._errors.close()
            self._errors = None


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Tear the workload down and reap its launcher.

    The launcher is signalled first so it can reap its tree; the group is only
    killed while the launcher is unreaped (alive or a zombie), because until then
    its pid, and so the group id, cannot belong to anyone else.
    """
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if info is not None:
            break
        time.sleep(0.005)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
