"""The real host side of a demo: ``python -m gputop.demo.workload --scenario NAME ...``.

Process tree (all in one process group, confined to ``DEMO_CPUS`` CPUs)::

    gputop-demo            launcher: starts the rest, reaps everything, tears down
    ├── demo_trainer       training loop: waits for batches, burns CPU launching kernels,
    │   ├── pt_data_worker     sleeps until its modelled GPU step is done
    │   └── pt_data_worker DataLoader-like workers (named as PyTorch names them)
    └── cpu_hog ...        background CPU hogs, where the scenario has contention

In the cpu-limit demo the launcher first joins the CPU-limited cgroup gputop made
(``--cgroup``), so the whole job runs under that limit.

The trainer publishes its progress (``gputop.demo.progress``) in a memory page
gputop passes as a file descriptor; gputop's modelled GPU turns it into numbers.
Nothing outlives gputop: the launcher gets SIGTERM when gputop dies
(PR_SET_PDEATHSIG), every child gets SIGKILL when its parent dies, and the
launcher is a child subreaper so it reaps the workers too.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gputop.demo import cgroup as demo_cgroup
from gputop.demo.gpumodel import GpuSpec
from gputop.demo.progress import Progress, ProgressPage
from gputop.demo.scenarios import DEMO_CPUS, SCENARIOS, Scenario

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
_BATCH = b"b" * 256

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int | bytes) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_name(name: str) -> None:
    """Set this process's name (comm), as PyTorch does for its workers."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Get ``sig`` when the parent dies; exit now if it already has (fork race)."""
    _prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def burn_cpu(ms: float) -> None:
    """Use ``ms`` milliseconds of CPU time (not wall time: contention stretches it)."""
    end = time.thread_time_ns() + int(ms * 1e6)
    while time.thread_time_ns() < end:
        for _ in range(100):
            pass


def _fork(body: Callable[[], None]) -> int:
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            die_with_parent(parent)
            body()
        except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
            code = 1
        finally:
            os._exit(code)
    return pid


# ---- children -------------------------------------------------------------------


def hog() -> None:
    """A background job that wants a whole CPU."""
    set_name("cpu_hog")
    x = 0
    while True:
        x += 1


def worker(sc: Scenario, requests: int, batches: int) -> None:
    """A DataLoader worker: one batch per request, in order, until the trainer goes away."""
    set_name("pt_data_worker")
    while os.read(requests, 1):
        burn_cpu(sc.worker_cpu_ms)
        if sc.worker_io_ms:
            time.sleep(sc.worker_io_ms / 1000.0)
        os.write(batches, _BATCH)


def trainer(sc: Scenario, page: ProgressPage, spec: GpuSpec) -> None:
    """The training loop: next batch, launch the step's kernels, wait for the modelled GPU."""
    set_name("demo_trainer")
    me = os.getpid()
    req_w: list[int] = []
    data_r: list[int] = []
    for _ in range(sc.num_workers):
        rq_r, rq_w = os.pipe()
        dt_r, dt_w = os.pipe()

        def body(
            rq: int = rq_r, dt: int = dt_w, theirs: tuple[int, ...] = (*req_w, *data_r, rq_w, dt_r)
        ) -> None:
            # Drop the other workers' pipe ends so each pipe closes when the trainer dies.
            for fd in theirs:
                os.close(fd)
            worker(sc, rq, dt)

        _fork(body)
        os.close(rq_r)
        os.close(dt_w)
        req_w.append(rq_w)
        data_r.append(dt_r)
    for w in req_w:
        os.write(w, b"r" * sc.prefetch_factor)
    kernel_ns = int(sc.step_gpu_ms(spec) * 1e6 / sc.kernels_per_step)
    launch_ms = sc.launch_cpu_ms / sc.kernels_per_step
    p = Progress(trainer_pid=me)
    step = 0
    while True:
        w = step % sc.num_workers
        waited = time.monotonic_ns()
        # Batches come back in order from each worker, as in torch's DataLoader.
        if not os.read(data_r[w], len(_BATCH)):
            return
        os.write(req_w[w], b"r")
        t0 = time.monotonic_ns()
        p = replace(p, data_wait_ns=p.data_wait_ns + t0 - waited, step_t0_ns=t0)
        page.write(p)
        free_at = p.gpu_free_at_ns
        for _ in range(sc.kernels_per_step):
            burn_cpu(launch_ms)
            free_at = max(time.monotonic_ns(), free_at) + kernel_ns
            p = replace(p, sched_compute_ns=p.sched_compute_ns + kernel_ns, gpu_free_at_ns=free_at)
            page.write(p)
        # torch.cuda.synchronize(): sleep until the modelled GPU finishes the step. The
        # step's kernels stay queued until the trainer is back on a CPU to see that.
        left = free_at - time.monotonic_ns()
        if left > 0:
            time.sleep(left / 1e9)
        step += 1
        p = replace(
            p,
            ready=1,
            steps=step,
            busy_done_ns=p.busy_done_ns + time.monotonic_ns() - t0,
            step_t0_ns=0,
        )
        page.write(p)


# ---- launcher -------------------------------------------------------------------


class _Stop(Exception):
    pass


def _stop(_sig: int, _frame: object) -> None:
    raise _Stop


def _confine_cpus() -> None:
    """Run on DEMO_CPUS of the CPUs we may use, so every host sees the same demo."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[:DEMO_CPUS])


def launch(sc: Scenario, page: ProgressPage, cgroup: str | None = None) -> int:
    """Start the scenario's processes and wait; tear everything down on a signal.

    With ``cgroup`` (the cpu-limit demo's CPU-limited cgroup) the launcher joins it
    first, so all it starts is born in it, and removes it once they are gone.
    """
    children: list[int] = []
    home = None
    try:
        if cgroup is not None:
            home = demo_cgroup.own_cgroup(cgroup)
            demo_cgroup.join(cgroup)
        _confine_cpus()
        ncpu = len(os.sched_getaffinity(0))
        for _ in range(sc.hogs(ncpu)):
            children.append(_fork(hog))
        children.append(_fork(lambda: trainer(sc, page, GpuSpec())))
        # Any child exiting on its own ends the demo: gputop reports it.
        os.wait()
        return 1
    except _Stop:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_all(deadline_s=3.0)
        if cgroup is not None and home is not None:
            demo_cgroup.leave(home)
            demo_cgroup.remove(cgroup)


def _reap_all(deadline_s: float) -> None:
    """Reap children and adopted orphans (we are their subreaper) until none is left."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the workload process that DemoGpuSource starts."""
    ap = argparse.ArgumentParser(prog="gputop.demo.workload")
    ap.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    ap.add_argument("--shm-fd", type=int, required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--cgroup", help="a CPU-limited cgroup to run the job in")
    args = ap.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _stop)
    try:
        # gputop dying (even by SIGKILL) sends us SIGTERM, which tears the demo down.
        die_with_parent(args.parent, signal.SIGTERM)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        set_name("gputop-demo")
        page = ProgressPage(args.shm_fd)
        return launch(SCENARIOS[args.scenario], page, args.cgroup)
    except _Stop:
        return 0


if __name__ == "__main__":
    sys.exit(main())
