"""The real host side of a demo: ``python -m gputop.demo.workload --scenario NAME ...``.

Process tree (all in one process group, confined to ``DEMO_CPUS`` CPUs)::

    gputop-demo            launcher: starts the rest, reaps everything, tears down
    ├── demo_trainer       training loop: waits for batches, burns CPU launching kernels,
    │   ├── pt_data_worker     sleeps until its modelled GPU step is done
    │   └── pt_data_worker DataLoader-like workers (named as PyTorch names them)
    └── cpu_hog ...        background CPU hogs, where the scenario has contention

In the cpu-limit demo the launcher first joins the CPU-limited cgroup gputop made
(``--cgroup``), so the whole job runs under that limit. In the storage demo it attaches
a throttled loop device (``gputop.demo.storage``) that the workers read from their own
I/O cgroup (``--io-cgroup``); in the trainer-work demo the trainer waits for its modelled
GPU inside the stand-in CUDA driver (``--cuda-lib``, ``gputop.demo.cudastub``).

In the straggler demo the launcher execs one trainer per rank instead (``--rank R``, with
torchrun's variables in its environment, each pinned to its own demo CPU, its workers
with it), and its CPU hogs share rank 0's CPU only. The ranks meet in an all-reduce every
step: each rank's ``pt_gloo_runloop`` thread swaps a token with the other ranks over a
socket pair and wakes its main thread, as gloo's work loop does, so the waits it ends
are the probe's collective waits.

The trainer publishes its progress (``gputop.demo.progress``) in a memory page
gputop passes as a file descriptor; gputop's modelled GPU turns it into numbers.
Nothing outlives gputop: the launcher gets SIGTERM when gputop dies
(PR_SET_PDEATHSIG), every child gets SIGKILL when its parent dies, and the
launcher is a child subreaper so it reaps the workers too.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import mmap
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gputop.demo import cgroup as demo_cgroup
from gputop.demo import storage as demo_storage
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


def worker(sc: Scenario, requests: int, batches: int, disk: Disk | None = None) -> None:
    """A DataLoader worker: one batch per request, in order, until the trainer goes away.

    With ``disk`` it joins the disk's throttled I/O cgroup and reads the scenario's
    blocks of it for each batch, bypassing the page cache (each read waits in D)."""
    set_name("pt_data_worker")
    fd = -1
    buf = None
    seed = os.getpid()
    if disk is not None:
        demo_storage.join(disk.cgroup)
        fd = demo_storage.open_direct(disk.device)
        buf = memoryview(mmap.mmap(-1, demo_storage.BLOCK))  # O_DIRECT wants it page-aligned
    while os.read(requests, 1):
        burn_cpu(sc.worker_cpu_ms)
        if buf is not None:
            seed = demo_storage.read_blocks(fd, buf, sc.reads_per_batch, seed)
        if sc.worker_io_ms:
            time.sleep(sc.worker_io_ms / 1000.0)
        os.write(batches, _BATCH)


@dataclass(frozen=True, slots=True)
class Disk:
    """The storage demo's throttled loop device and the I/O cgroup its readers join."""

    device: str
    cgroup: str


class _Gpu:
    """How the trainer waits for its modelled GPU: asleep in ``time.sleep``, or inside the
    stand-in CUDA driver's ``cuCtxSynchronize`` (the trainer-work demo), which the probe
    measures."""

    def __init__(self, cuda_lib: str | None) -> None:
        self._lib = ctypes.CDLL(cuda_lib) if cuda_lib else None
        if self._lib is not None:
            self._lib.gputop_demo_gpu_free_at.argtypes = [ctypes.c_longlong]

    def wait_until(self, free_at_ns: int) -> None:
        if self._lib is not None:
            self._lib.gputop_demo_gpu_free_at(free_at_ns)
            self._lib.cuCtxSynchronize()
            return
        left = free_at_ns - time.monotonic_ns()
        if left > 0:
            time.sleep(left / 1e9)


class Collective:
    """A rank's all-reduce with the job's other ranks (one connected socket each).

    Like gloo's, the exchange runs on the rank's own ``pt_gloo_runloop`` thread: the main
    thread hands it the step and blocks until that thread wakes it with the result, so
    the time the main thread waits for slower ranks is a wait the probe sees ended by a
    collective-communication thread.
    """

    def __init__(self, peers: Sequence[int]) -> None:
        self._peers = [socket.socket(fileno=fd) for fd in peers]
        self._start_r, self._start_w = os.pipe()
        self._done_r, self._done_w = os.pipe()
        threading.Thread(target=self._loop, name="pt_gloo_runloop", daemon=True).start()

    def all_reduce(self) -> bool:
        """One step's all-reduce; False once another rank has gone."""
        os.write(self._start_w, b"s")
        return bool(os.read(self._done_r, 1))

    def _loop(self) -> None:
        set_name("pt_gloo_runloop")
        try:
            while os.read(self._start_r, 1):
                for peer in self._peers:
                    peer.sendall(b"t")
                for peer in self._peers:
                    if not peer.recv(1):
                        return
                os.write(self._done_w, b"d")
        except OSError:
            return
        finally:
            # Wakes the main thread with end-of-file: the job has lost a rank.
            os.close(self._done_w)


def trainer(
    sc: Scenario,
    page: ProgressPage,
    spec: GpuSpec,
    disk: Disk | None = None,
    cuda_lib: str | None = None,
    peers: Sequence[int] = (),
) -> None:
    """The training loop: next batch, launch the step's kernels, wait for the modelled GPU,
    and with ``peers`` (sockets to the job's other ranks) meet them in an all-reduce (its
    kernel stays queued on the GPU, computing nothing, until the slowest rank arrives)."""
    set_name("demo_trainer")
    me = os.getpid()
    gpu = _Gpu(cuda_lib)
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
            worker(sc, rq, dt, disk)

        _fork(body)
        os.close(rq_r)
        os.close(dt_w)
        req_w.append(rq_w)
        data_r.append(dt_r)
    for w in req_w:
        os.write(w, b"r" * sc.prefetch_factor)
    # Started once the workers are: they fork without its thread.
    collective = Collective(peers) if peers else None
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
        p = replace(p, data_wait_ns=p.data_wait_ns + t0 - waited)
        if sc.trainer_cpu_ms:
            # Per-step Python before the first launch (metrics, logging, batch fix-ups):
            # the GPU has nothing queued meanwhile.
            burn_cpu(sc.trainer_cpu_ms)
            t0 = time.monotonic_ns()
        p = replace(p, step_t0_ns=t0)
        page.write(p)
        free_at = p.gpu_free_at_ns
        for _ in range(sc.kernels_per_step):
            burn_cpu(launch_ms)
            free_at = max(time.monotonic_ns(), free_at) + kernel_ns
            p = replace(p, sched_compute_ns=p.sched_compute_ns + kernel_ns, gpu_free_at_ns=free_at)
            page.write(p)
        # torch.cuda.synchronize(): sleep until the modelled GPU finishes the step. The
        # step's kernels stay queued until the trainer is back on a CPU to see that.
        gpu.wait_until(free_at)
        if collective is not None and not collective.all_reduce():
            return
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


def launch(
    sc: Scenario,
    page: ProgressPage,
    shm_fd: int,
    cgroup: str | None = None,
    io_cgroup: str | None = None,
    cuda_lib: str | None = None,
) -> int:
    """Start the scenario's processes and wait; tear everything down on a signal.

    With ``cgroup`` (the cpu-limit demo's CPU-limited cgroup) the launcher joins it
    first, so all it starts is born in it, and removes it once they are gone. With
    ``io_cgroup`` (the storage demo) it attaches the throttled disk, makes that cgroup
    for the workers to join, and removes it at the end; the disk goes with its last
    reader (autoclear).
    """
    children: list[int] = []
    home = None
    disk_fd = -1
    disk = None
    try:
        if cgroup is not None:
            home = demo_cgroup.own_cgroup(cgroup)
            demo_cgroup.join(cgroup)
        if io_cgroup is not None and sc.read_iops is not None:
            disk_fd, device = demo_storage.attach_loop()
            demo_storage.throttle(io_cgroup, device, sc.read_iops)
            disk = Disk(device, io_cgroup)
        _confine_cpus()
        ncpu = len(os.sched_getaffinity(0))
        for _ in range(sc.hogs(ncpu)):
            children.append(_fork(hog))
        if sc.ranks > 1:
            children += _start_ranks(sc, shm_fd)
        else:
            children.append(_fork(lambda: trainer(sc, page, GpuSpec(), disk, cuda_lib)))
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
        if io_cgroup is not None:
            demo_storage.remove(io_cgroup)
        if disk_fd >= 0:
            os.close(disk_fd)


def _start_ranks(sc: Scenario, shm_fd: int) -> list[int]:
    """Exec one trainer per rank, rank ``r`` pinned to demo CPU ``r``, and rank 0's CPU
    hogs on its CPU; each pair of ranks is connected by a socket pair for the all-reduce."""
    cpus = sorted(os.sched_getaffinity(0))
    ends: dict[int, list[socket.socket]] = {r: [] for r in range(sc.ranks)}
    for a in range(sc.ranks):
        for b in range(a + 1, sc.ranks):
            sa, sb = socket.socketpair()
            ends[a].append(sa)
            ends[b].append(sb)
    env = dict(os.environ)
    env.update(
        WORLD_SIZE=str(sc.ranks),
        LOCAL_WORLD_SIZE=str(sc.ranks),
        TORCHELASTIC_RUN_ID=f"gputop-demo-{os.getpid()}",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
    )
    argv = [sys.executable, "-m", "gputop.demo.workload", "--scenario", sc.name]
    argv += ["--shm-fd", str(shm_fd), "--parent", str(os.getpid())]

    def rank(r: int) -> None:
        os.sched_setaffinity(0, {cpus[r]})
        # Only this rank's ends of the socket pairs survive its exec (the rest close, so a
        # rank that dies ends its peers' all-reduce).
        peers = [s.fileno() for s in ends[r]]
        for fd in (shm_fd, *peers):
            os.set_inheritable(fd, True)
        ranked = {**env, "RANK": str(r), "LOCAL_RANK": str(r)}
        os.execve(
            sys.executable,
            [*argv, "--rank", str(r), "--peers", ",".join(map(str, peers))],
            ranked,
        )

    def rank0_hog() -> None:
        os.sched_setaffinity(0, {cpus[0]})
        hog()

    try:
        started = [_fork(functools.partial(rank, r)) for r in range(sc.ranks)]
        started += [_fork(rank0_hog) for _ in range(sc.rank0_hogs)]
        return started
    finally:
        for socks in ends.values():
            for s in socks:
                s.close()


def rank_main(sc: Scenario, shm_fd: int, rank: int, peers: Sequence[int]) -> int:
    """A rank of the straggler demo's job, exec'd by the launcher: its trainer, with the
    all-reduce (its parent-death signal and CPU came through the exec)."""
    page = ProgressPage(shm_fd, rank)
    trainer(sc, page, GpuSpec(), peers=peers)
    return 1


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
    ap.add_argument("--io-cgroup", help="the I/O cgroup to make for the throttled disk's readers")
    ap.add_argument("--cuda-lib", help="the stand-in libcuda.so.1 the trainer waits in")
    ap.add_argument("--rank", type=int, help="run this rank's trainer (exec'd by the launcher)")
    ap.add_argument("--peers", default="", help="the sockets to the other ranks (fds)")
    args = ap.parse_args(argv)
    sc = SCENARIOS[args.scenario]
    if args.rank is not None:
        die_with_parent(args.parent)
        peers = [int(fd) for fd in args.peers.split(",") if fd]
        return rank_main(sc, args.shm_fd, args.rank, peers)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _stop)
    try:
        # gputop dying (even by SIGKILL) sends us SIGTERM, which tears the demo down.
        die_with_parent(args.parent, signal.SIGTERM)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        set_name("gputop-demo")
        page = ProgressPage(args.shm_fd)
        return launch(sc, page, args.shm_fd, args.cgroup, args.io_cgroup, args.cuda_lib)
    except _Stop:
        return 0


if __name__ == "__main__":
    sys.exit(main())
