"""Ground truth for the wait split: a real PyTorch DataLoader training loop that measures itself.

Run as a script (``python tests/truthloop.py --out FILE ...``), it trains with
real DataLoader workers (each sample costs ``--sample-cpu-ms`` of CPU in the
worker) and a GPU stand-in step that sleeps or busy-spins. Around every
``next(iterator)`` it reads its main thread's wall clock (``time.perf_counter``,
CLOCK_MONOTONIC), its on-CPU time (``time.thread_time_ns``) and its run-queue
wait (``/proc/self/task/TID/schedstat``), so what is left is the time it was
*blocked* inside ``next``; around the GPU step it reads its on-CPU time again (what
a spinning synchronization burns). One line per step goes to ``--out``:

    next_start next_end blocked_in_next_ns step_end runq_in_next_ns step_cpu_ns wait_start
    work_cpu_ns copy_start copy_ns

(monotonic seconds, nanoseconds; ``wait_start``: when the step's first waiting CUDA call
began, or next_end without the fake libcuda; ``work_cpu_ns``: on a CPU from next()'s start
to the GPU step; ``copy_start``/``copy_ns``: the batch's host-to-device copy with
``--h2d-ms``, when it began and how long it took, else 0). ``blocked_share()`` turns those
lines into the share of a window [t0, t1] the loop spent blocked in ``next``, so a test can
set it beside gputop's ``wait_input_pct`` over the same window.

Tests import ``running_loop`` and ``blocked_share``; the loop itself imports only
torch and the standard library, so ``spawn`` and ``forkserver`` workers can
import this file as their main module.
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REMOTE_REPLY = 4096  # bytes a --remote server answers each request with (tests/netutil.py)


def _busy(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


class Work:
    """The workers' dataset, importable by pickling (spawn/forkserver need a module-level class).

    ``read_dev``: each sample also reads one random 4 KiB block of this device with
    O_DIRECT (no page cache), and the worker appends "unix_time total_read_s monotonic_time"
    after each read to ``{reads_to}.{its pid}`` (its own clock, ``perf_counter``).
    ``remote``: each sample is fetched from this ``host:port`` instead (one request line,
    a reply of ``REMOTE_REPLY`` bytes: tests/netutil.py's server), logged the same way with
    its time blocked inside requests (wall time less its CPU time and run-queue wait).
    """

    def __init__(
        self,
        sample_cpu_ms: float,
        epoch_len: int,
        read_dev: str | None = None,
        reads_to: str = "",
        remote: str | None = None,
    ) -> None:
        self.sample_cpu_ms = sample_cpu_ms
        self.epoch_len = epoch_len
        self.read_dev = read_dev
        self.reads_to = reads_to
        self.remote = remote
        self._fd = -1
        self._sock: socket.socket | None = None
        self._read_s = 0.0

    def __len__(self) -> int:
        return self.epoch_len

    def _read(self, i: int) -> None:
        if self._fd < 0:
            assert self.read_dev is not None
            self._fd = os.open(self.read_dev, os.O_RDONLY | os.O_DIRECT)
            self._blocks = os.lseek(self._fd, 0, os.SEEK_END) // 4096
            self._buf = mmap.mmap(-1, 4096)
            self._log = open(f"{self.reads_to}.{os.getpid()}", "a", buffering=1)
        t0 = time.perf_counter()
        os.preadv(self._fd, [self._buf], (i * 7919 % self._blocks) * 4096)
        self._read_s += time.perf_counter() - t0
        self._log.write(f"{time.time()} {self._read_s} {time.perf_counter()}\n")

    def _fetch(self) -> None:
        if self._sock is None:
            assert self.remote is not None
            host, _, port = self.remote.rpartition(":")
            self._sock = socket.create_connection((host, int(port)))
            self._log = open(f"{self.reads_to}.{os.getpid()}", "a", buffering=1)
            self._tid = threading.get_native_id()
        # Blocked inside the request: its wall time less its CPU time and its wait for a CPU
        # (schedstat), what is left of the request once the reply arrived.
        t0, c0, r0 = time.perf_counter(), time.thread_time_ns(), _run_delay_ns(self._tid)
        self._sock.sendall(b"get\n")
        got = 0
        while got < REMOTE_REPLY:
            got += len(self._sock.recv(65536))
        wall = time.perf_counter() - t0
        cpu_runq = (time.thread_time_ns() - c0) + (_run_delay_ns(self._tid) - r0)
        self._read_s += max(0.0, wall - cpu_runq / 1e9)
        self._log.write(f"{time.time()} {self._read_s} {time.perf_counter()}\n")

    def __getitem__(self, i: int) -> object:
        import torch

        if self.read_dev is not None:
            self._read(i)
        if self.remote is not None:
            self._fetch()
        _busy(self.sample_cpu_ms / 1000.0)
        return torch.zeros(4)


# A busy process with its own name, in the loop's session (so in its autogroup).
HOG_CODE = """
with open("/proc/self/comm", "w") as f:
    f.write({comm!r})
while True:
    pass
"""


class _Cuda:
    """The GPU step in the fake libcuda (tests/fakecuda/). ``sync``: cuStreamSynchronize
    waits the step. ``item``: the step's work is queued, then a tensor's ``.item()`` as
    torch makes it (memcpy_and_sync): cuMemcpyDtoHAsync_v2 into pageable memory, which
    waits for the queued work inside the copy, then cuStreamSynchronize, which finds
    nothing left to wait for. ``waited_at`` is when the step's first waiting call began."""

    def __init__(self, path: str, step_s: float, spin: bool, kind: str, h2d_s: float = 0.0) -> None:
        import ctypes

        self.lib = ctypes.CDLL(path)
        self.kind = kind
        self.step_ns = ctypes.c_longlong(int(step_s * 1e9))
        self.lib.fake_cuda_set(self.step_ns if kind == "sync" else ctypes.c_longlong(0), int(spin))
        self.scalar = ctypes.create_string_buffer(4)
        self.waited_at = 0.0
        # The batch's copy to the GPU from pageable memory: the driver staging it on a CPU.
        self.h2d = h2d_s > 0
        self.lib.fake_cuda_set_h2d(ctypes.c_longlong(int(h2d_s * 1e9)), 1)
        self.batch = ctypes.create_string_buffer(1 << 16)
        self.device = ctypes.c_ulonglong()
        self.lib.cuMemAlloc_v2(ctypes.byref(self.device), ctypes.c_size_t(1 << 16))
        self.copy_at = 0.0
        self.copy_ns = 0

    def copy(self) -> None:
        """The batch's ``.to("cuda")``: cuMemcpyHtoDAsync_v2 from pageable memory."""
        import ctypes

        self.copy_at = time.perf_counter()
        self.lib.cuMemcpyHtoDAsync_v2(
            ctypes.c_ulonglong(self.device.value), self.batch, ctypes.c_size_t(1 << 16), None
        )
        self.copy_ns = int((time.perf_counter() - self.copy_at) * 1e9)

    def step(self) -> None:
        if self.h2d:
            self.copy()
        if self.kind == "item":
            self.lib.fake_cuda_launch(self.step_ns)
            self.waited_at = time.perf_counter()
            self.lib.cuMemcpyDtoHAsync_v2(self.scalar, None, 4, None)
        else:
            self.waited_at = time.perf_counter()
        self.lib.cuStreamSynchronize(None)


_cuda: _Cuda | None = None


def _standin(kind: str, step_s: float) -> None:
    """The GPU step's stand-in: sleep (a blocking sync) or busy-spin (CUDA's default);
    ``cuda-sleep`` / ``cuda-spin``: the same inside the fake libcuda's synchronize call."""
    if kind.startswith("cuda-"):
        assert _cuda is not None
        _cuda.step()
        return
    if kind == "sleep":
        time.sleep(step_s)
        return
    end = time.perf_counter() + step_s
    while time.perf_counter() < end:
        pass


def _workers_named(n: int, timeout_s: float = 60.0) -> None:
    """Wait until n processes of this session run as DataLoader workers (pt_data_worker)."""
    deadline = time.monotonic() + timeout_s
    me = str(os.getsid(0))
    while time.monotonic() < deadline:
        found = 0
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if "(pt_data_worker)" in stat and stat.rsplit(")", 1)[1].split()[3] == me:
                found += 1
        if found >= n:
            return
        time.sleep(0.05)
    raise TimeoutError("DataLoader workers did not start")


class _Phase:
    """A shared byte telling a test whether the loop is inside next() (1) or not (0)."""

    def __init__(self, path: str | None) -> None:
        self._map: mmap.mmap | None = None
        if path is not None:
            with open(path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), 1)

    def set(self, v: int) -> None:
        if self._map is not None:
            self._map[0] = v


def _run_delay_ns(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a self-measuring DataLoader training loop")
    ap.add_argument("--out", required=True)
    ap.add_argument("--start-method", default="fork", choices=("fork", "spawn", "forkserver"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--sample-cpu-ms", type=float, default=8.0)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument(
        "--standin", default="sleep", choices=("sleep", "spin", "cuda-sleep", "cuda-spin")
    )
    ap.add_argument("--cuda-lib", default=None, help="the fake libcuda.so.1 (cuda-* stand-ins)")
    ap.add_argument(
        "--cuda-step",
        default="sync",
        choices=("sync", "item"),
        help="cuda-* stand-ins: cuStreamSynchronize waits (sync), or .item()'s copy does (item)",
    )
    ap.add_argument(
        "--h2d-ms",
        type=float,
        default=0.0,
        help="cuda-* stand-ins: copy each batch to the GPU first (the fake's"
        " cuMemcpyHtoDAsync_v2 from pageable memory, on a CPU this long)",
    )
    ap.add_argument(
        "--cuda-after-s",
        type=float,
        default=0.0,
        help="load the CUDA library this long after ready (before: the plain stand-in)",
    )
    ap.add_argument(
        "--trainer-cpu-ms",
        type=float,
        default=0.0,
        help="CPU time the trainer burns each step between next() and the GPU step (its own"
        " work; the line's wait_start then marks its end)",
    )
    ap.add_argument("--read-dev", default=None, help="each sample reads a block of this device")
    ap.add_argument("--remote", default=None, help="each sample is fetched from this host:port")
    ap.add_argument("--cgroup-procs", default=None, help="join this cgroup first (its procs file)")
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--epoch-len", type=int, default=10**9)
    ap.add_argument("--cpu", type=int, default=None, help="pin the process to this CPU")
    ap.add_argument(
        "--autogroup-nice",
        type=int,
        default=None,
        help="weigh the loop's session (its autogroup) like this nice value (root): a shared"
        " machine's other sessions then take less of the CPU the loop needs",
    )
    ap.add_argument(
        "--no-next",
        action="store_true",
        help="start the workers, then only run the stand-in (never take a batch)",
    )
    ap.add_argument(
        "--phase-file",
        default=None,
        help="a 1-byte file the loop keeps at 1 while inside next() and 0 outside",
    )
    ap.add_argument(
        "--hog-comm",
        default=None,
        help="also start a busy process of this name in this session (written to OUT.hog)",
    )
    args = ap.parse_args(argv)

    from torch.utils.data import DataLoader

    if args.cgroup_procs:
        Path(args.cgroup_procs).write_text(str(os.getpid()))  # the workers inherit it
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.autogroup_nice is not None:
        Path("/proc/self/autogroup").write_text(str(args.autogroup_nice))
    dl = DataLoader(
        Work(args.sample_cpu_ms, args.epoch_len, args.read_dev, args.out + ".reads", args.remote),  # type: ignore[arg-type]
        num_workers=args.workers,
        batch_size=args.batch_size,
        # Worker options only where there are workers (DataLoader refuses them otherwise).
        multiprocessing_context=args.start_method if args.workers else None,
        persistent_workers=args.persistent and args.workers > 0,
    )
    tid = threading.get_native_id()
    step_s = args.step_ms / 1000.0
    it = iter(dl)
    if args.hog_comm:
        hog = subprocess.Popen([sys.executable, "-c", HOG_CODE.format(comm=args.hog_comm)])
        Path(args.out + ".hog").write_text(str(hog.pid))
    if args.no_next:
        _workers_named(args.workers)
    else:
        next(it)
    standin = args.standin
    cuda_at = time.monotonic() + args.cuda_after_s
    if standin.startswith("cuda-") and args.cuda_after_s > 0:
        standin = standin.removeprefix("cuda-")  # until CUDA "initialises"

    def load_cuda() -> None:
        global _cuda
        nonlocal standin
        if _cuda is None and args.standin.startswith("cuda-") and time.monotonic() >= cuda_at:
            assert args.cuda_lib, "--cuda-lib is needed for a cuda-* stand-in"
            _cuda = _Cuda(
                args.cuda_lib,
                step_s,
                args.standin == "cuda-spin",
                args.cuda_step,
                args.h2d_ms / 1000.0,
            )
            standin = args.standin

    # A process NVML lists has its CUDA context: the library is mapped before "ready"
    # (unless --cuda-after-s asks for a late one).
    load_cuda()
    print("ready", flush=True)
    phase = _Phase(args.phase_file)

    def gpu_step() -> None:
        load_cuda()
        _standin(standin, step_s)

    with open(args.out, "w", buffering=1) as out:
        while args.no_next:
            t0 = time.perf_counter()
            c0 = time.thread_time_ns()
            gpu_step()
            end = time.perf_counter()
            out.write(f"{t0:.7f} {t0:.7f} 0 {end:.7f} 0 {time.thread_time_ns() - c0}\n")
        while True:
            phase.set(1)
            t0 = time.perf_counter()
            c0 = time.thread_time_ns()
            r0 = _run_delay_ns(tid)
            try:
                next(it)
            except StopIteration:
                it = iter(dl)  # a new epoch: without persistent_workers, new workers
                next(it)
            t1 = time.perf_counter()
            c1 = time.thread_time_ns()
            r1 = _run_delay_ns(tid)
            blocked = int((t1 - t0) * 1e9) - (c1 - c0) - (r1 - r0)
            phase.set(0)
            if args.trainer_cpu_ms:
                _busy(args.trainer_cpu_ms / 1000.0)
            c2 = time.thread_time_ns()
            gpu_step()
            end = time.perf_counter()
            c3 = time.thread_time_ns()
            waited = _cuda.waited_at if _cuda is not None else t1
            copy_at, copy_ns = (_cuda.copy_at, _cuda.copy_ns) if _cuda is not None else (0.0, 0)
            out.write(
                f"{t0:.7f} {t1:.7f} {max(0, blocked)} {end:.7f} {r1 - r0} {c3 - c2} {waited:.7f}"
                f" {c2 - c0} {copy_at:.7f} {copy_ns}\n"
            )


@dataclass(frozen=True)
class Step:
    """One training step as the loop measured it."""

    next_start: float
    next_end: float
    blocked_ns: int
    step_end: float
    runq_ns: int = 0  # waiting for a CPU inside next()
    step_cpu_ns: int = 0  # on a CPU during the GPU step (a spinning sync's own CPU time)
    wait_start: float = 0.0  # when the step's first waiting CUDA call began (0: not recorded)
    # On a CPU from next()'s start to the GPU step: unpickling and collating the batch, and
    # the trainer's own work per step (its thread CPU clock; 0: not recorded).
    work_cpu_ns: int = 0
    copy_start: float = 0.0  # the batch's host-to-device copy: when it began (0: none)
    copy_ns: int = 0  # and how long it took


def read_steps(path: Path) -> list[Step]:
    steps = []
    for line in path.read_text().splitlines(keepends=True):
        parts = line.split()
        if len(parts) not in (6, 7, 8, 10) or not line.endswith("\n"):
            continue  # the last line may be half-written
        steps.append(
            Step(
                float(parts[0]),
                float(parts[1]),
                int(parts[2]),
                float(parts[3]),
                int(parts[4]),
                int(parts[5]),
                float(parts[6]) if len(parts) >= 7 else 0.0,
                int(parts[7]) if len(parts) >= 8 else 0,
                float(parts[8]) if len(parts) == 10 else 0.0,
                int(parts[9]) if len(parts) == 10 else 0,
            )
        )
    return steps


def span_share(spans: Iterable[tuple[float, float, int]], t0: float, t1: float) -> float:
    """% of [t0, t1] taken by ``ns`` nanoseconds spent somewhere inside each (start, end);
    a span that straddles an edge counts in proportion to its overlap with the window."""
    total = 0.0
    for start, end, ns in spans:
        span = end - start
        if span <= 0:
            continue
        overlap = min(end, t1) - max(start, t0)
        if overlap > 0:
            total += ns / 1e9 * overlap / span
    return 100.0 * total / (t1 - t0)


def blocked_share(steps: Sequence[Step], t0: float, t1: float) -> float:
    """% of [t0, t1] the loop was blocked inside next()."""
    return span_share(((s.next_start, s.next_end, s.blocked_ns) for s in steps), t0, t1)


class PhaseReader:
    """The test's side of ``--phase-file``: is the loop inside next() right now?"""

    def __init__(self, path: Path) -> None:
        path.write_bytes(b"\x01")
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 1)

    def inside_next(self) -> bool:
        return self._map[0] == 1

    def wait_outside(self, timeout_s: float) -> bool:
        """Wait until the loop is outside next(); False if it never was within timeout_s."""
        deadline = time.monotonic() + timeout_s
        while self.inside_next():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True


@contextmanager
def running_loop(directory: Path, args: Sequence[str] = ()) -> Iterator[tuple[int, Path]]:
    """The loop running in its own session, ready; yields (its pid, its output file).

    Everything it started (workers, a forkserver) is killed afterwards.
    """
    out = directory / "steps.txt"
    argv = ["--out", str(out), *args]
    if any(a in ("spawn", "forkserver") for a in args):
        # Their workers import this file as a fresh interpreter's main module.
        p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *argv],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert p.stdout is not None
        pid, stdout, wait = p.pid, p.stdout, p.wait
    else:
        from tests.preloaded import spawn

        child = spawn(__file__, argv, new_session=True)
        pid, stdout, wait = child.pid, child.stdout, child.wait
    try:
        assert stdout.readline() == "ready\n", "the training loop did not start"
        yield pid, out
    finally:
        os.killpg(pid, signal.SIGKILL)
        wait()


if __name__ == "__main__":
    sys.exit(main())
