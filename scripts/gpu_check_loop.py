"""The training loop scripts/gpu_check.py watches gputop measure: it times its own GPU waits.

A small model trained on batches from real DataLoader workers. Each step ends in one
of four calls that wait for the GPU, the one named by the last ``kind NAME`` line on
stdin:

    synchronize  torch.cuda.synchronize()
    item         loss.item()                 (a blocking copy to pageable memory)
    cpu          logits.cpu()                (the same, a bigger tensor)
    event        Event.record(); Event.synchronize()

Two more kinds copy a ``--copy-mb`` batch to the GPU each step instead, and the line's
wait is that copy (the step still ends in ``loss.item()``):

    copy-pageable  batch.to("cuda")                           (pageable: the driver stages it)
    copy-pinned    pinned.to("cuda", non_blocking=True)       (pinned: DMA, returns at once)

Before it, each step gives the GPU ``--gpu-ms`` of work: ``torch.cuda._sleep`` (a
kernel that keeps few SMs busy: GPU_UTIL high, SM activity low), or with ``--matmul``
that long of large matrix products (every SM busy). One line per step goes to
``--out``: ``kind step_start wait_start wait_end step_end`` (``perf_counter``, the
CLOCK_MONOTONIC of the kernel's clocks), so the share of any window spent inside the
waiting call is known exactly.

``--fake LIB`` runs it with no GPU: the model trains on the CPU, and the fake
``libcuda.so.1`` (tests/fakecuda/) is the GPU: each step queues ``--gpu-ms`` of work
there (``fake_cuda_launch``), then calls the driver entry points the kind would reach,
through the pointers the fake's ``cuGetProcAddress`` hands out (as the CUDA runtime
gets them): ``cuCtxSynchronize``, ``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize``,
``cuMemcpyAsync`` + ``cuStreamSynchronize``, ``cuEventSynchronize``. They spin until
the work is done, as CUDA's default does while cores are plentiful.

It needs only torch and the standard library (it runs in the machine's own Python).
It prints ``ready`` once steps run.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable

KINDS = ("synchronize", "item", "cpu", "event", "copy-pageable", "copy-pinned")
# The fake's copies: a pageable one staged on a CPU at about 4 GB/s, a pinned one at once.
FAKE_PAGEABLE_MS_PER_MB = 0.25
FAKE_PINNED_MS = 0.02
RUNTIME_VERSION = 13000  # the CUDA version a CUDA 13 runtime asks cuGetProcAddress for
LEGACY_STREAM = 1  # CU_GET_PROC_ADDRESS_LEGACY_STREAM


def _busy(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


class Samples:
    """A dataset whose every sample costs ``cpu_ms`` of CPU in its worker."""

    def __init__(self, cpu_ms: float) -> None:
        self.cpu_ms = cpu_ms

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> object:
        import torch

        _busy(self.cpu_ms / 1000.0)
        return torch.randn(64), i % 10


class FakeGpu:
    """The fake libcuda as the GPU: queued work and the entry points each kind reaches."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        self.lib.fake_cuda_set(ctypes.c_longlong(0), 1)
        self.host = ctypes.create_string_buffer(4096)
        proto = ctypes.CFUNCTYPE(ctypes.c_int)
        self.fn = {
            name: proto(self._proc_address(name))
            for name in (
                "cuCtxSynchronize",
                "cuMemcpyDtoHAsync",
                "cuMemcpyAsync",
                "cuStreamSynchronize",
                "cuEventSynchronize",
            )
        }
        copy = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
        )
        self.h2d = copy(self._proc_address("cuMemcpyHtoDAsync"))
        self.device = ctypes.c_ulonglong()
        self.lib.cuMemAlloc_v2(ctypes.byref(self.device), ctypes.c_size_t(4096))

    def _proc_address(self, base: str) -> int:
        fn = ctypes.c_void_p()
        rc = self.lib.cuGetProcAddress_v2(
            base.encode(),
            ctypes.byref(fn),
            ctypes.c_int(RUNTIME_VERSION),
            ctypes.c_ulonglong(LEGACY_STREAM),
            None,
        )
        if rc != 0 or not fn.value:
            raise SystemExit(f"the fake libcuda has no {base}")
        return fn.value

    def launch(self, ms: float) -> None:
        self.lib.fake_cuda_launch(ctypes.c_longlong(int(ms * 1e6)))

    def copy(self, pinned: bool, mb: float) -> None:
        """A batch's copy to the GPU from host memory (cuMemcpyHtoDAsync, as the runtime
        gets it): staged on a CPU when pageable, handed to the DMA engine when pinned."""
        ms = FAKE_PINNED_MS if pinned else mb * FAKE_PAGEABLE_MS_PER_MB
        self.lib.fake_cuda_set_h2d(ctypes.c_longlong(int(ms * 1e6)), 1)
        self.h2d(self.device.value, ctypes.addressof(self.host), 4096, None)

    def wait(self, kind: str) -> None:
        if kind == "synchronize":
            self.fn["cuCtxSynchronize"]()
        elif kind == "item":
            self.fn["cuMemcpyDtoHAsync"]()
            self.fn["cuStreamSynchronize"]()
        elif kind == "cpu":
            self.fn["cuMemcpyAsync"]()
            self.fn["cuStreamSynchronize"]()
        else:
            self.fn["cuEventSynchronize"]()


def _sleep_cycles_per_ms(torch: object) -> float:
    """How many ``torch.cuda._sleep`` cycles make a millisecond on this GPU."""
    cuda = torch.cuda  # type: ignore[attr-defined]
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    cycles = 10_000_000
    cuda._sleep(cycles)  # warm up
    start.record()
    cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--fake", default=None, metavar="LIB", help="the fake libcuda.so.1: no GPU")
    ap.add_argument("--kind", default="item", choices=KINDS)
    ap.add_argument("--gpu-ms", type=float, default=20.0, help="GPU work per step")
    ap.add_argument("--matmul", action="store_true", help="the GPU work is large matmuls")
    ap.add_argument("--host-ms", type=float, default=0.0, help="extra CPU work per step")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sample-cpu-ms", type=float, default=0.1)
    ap.add_argument("--cpus", default=None, help="pin the loop (and its workers) to these CPUs")
    ap.add_argument("--copy-mb", type=float, default=64.0, help="the batch copy-* kinds copy")
    args = ap.parse_args(argv)

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    fake = FakeGpu(args.fake) if args.fake else None
    dev = torch.device("cpu" if fake else "cuda")
    loader = DataLoader(
        Samples(args.sample_cpu_ms),  # type: ignore[arg-type]
        batch_size=64,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=fake is None,
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    gpu_work: Callable[[], None]
    if fake is not None:
        gpu = fake
        gpu_work = lambda: gpu.launch(args.gpu_ms)  # noqa: E731
    elif args.matmul:
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _ = a @ a
        start.record()
        _ = a @ a
        end.record()
        end.synchronize()
        n = max(1, round(args.gpu_ms / max(start.elapsed_time(end), 1e-3)))

        def gpu_work() -> None:
            for _ in range(n):
                torch.mm(a, a)

    else:
        cycles = int(args.gpu_ms * _sleep_cycles_per_ms(torch))
        gpu_work = lambda: torch.cuda._sleep(cycles)  # noqa: E731

    kind = [args.kind]
    batch = pinned = None
    if fake is None:
        batch = torch.empty(int(args.copy_mb * 2**20) // 4, dtype=torch.float32)
        pinned = batch.pin_memory()

    def copy_batch(k: str) -> None:
        if fake is not None:
            fake.copy(k == "copy-pinned", args.copy_mb)
        elif k == "copy-pinned":
            assert pinned is not None
            pinned.to(dev, non_blocking=True)
        else:
            assert batch is not None
            batch.to(dev)

    def control() -> None:
        # A file of its own on the same pipe: a DataLoader worker forked while this
        # thread holds sys.stdin's lock would hang closing it (multiprocessing does).
        for line in open(os.dup(sys.stdin.fileno())):
            word, _, value = line.strip().partition(" ")
            if word == "kind" and value in KINDS:
                kind[0] = value

    threading.Thread(target=control, daemon=True).start()
    event = None if fake else torch.cuda.Event()
    it = iter(loader)
    with open(args.out, "w", buffering=1) as out:
        for step in range(10**12):
            t0 = time.perf_counter()
            x, y = next(it)
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if args.host_ms:
                _busy(args.host_ms / 1000.0)
            gpu_work()
            k = kind[0]
            w0 = time.perf_counter()
            if k.startswith("copy-"):
                copy_batch(k)
                w1 = time.perf_counter()
                end_step = "item"
            else:
                end_step = k
            if fake is not None:
                fake.wait(end_step)
            elif end_step == "synchronize":
                torch.cuda.synchronize()
            elif end_step == "item":
                loss.item()
            elif end_step == "cpu":
                logits.cpu()
            else:
                assert event is not None
                event.record()
                event.synchronize()
            if not k.startswith("copy-"):
                w1 = time.perf_counter()
            out.write(f"{k} {t0:.7f} {w0:.7f} {w1:.7f} {time.perf_counter():.7f}\n")
            if step == 3:
                print("ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
