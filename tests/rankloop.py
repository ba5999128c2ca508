"""Ground truth for collective waits: a gloo job under torchrun whose ranks time themselves.

Run by torchrun (``rank_job()`` launches it), each rank pins itself (and so its gloo
threads and DataLoader workers, started after) to one CPU, trains with 2 real DataLoader
workers whose samples cost ``--sample-cpu-ms`` of CPU, sleeps ``--step-ms`` as its GPU
step, then meets the other ranks: an explicit ``all_reduce`` (``--mode allreduce``) or a
``DistributedDataParallel`` backward whose all-reduce runs inside it (``--mode ddp``).
Each rank appends one line per step to ``OUT.RANK``:

    next_start next_end collective_start collective_end

(unix seconds, ``time.time``; the collective span is the ``all_reduce`` call or the whole
backward), and writes its pid to ``OUT.RANK.pid`` once its workers run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path


def _busy(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=("allreduce", "ddp"), default="allreduce")
    ap.add_argument("--sample-cpu-ms", type=float, default=2.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    args = ap.parse_args(argv)
    rank = int(os.environ["RANK"])
    ncpu = os.cpu_count() or 1
    # Before gloo and the workers start: they inherit the CPU.
    os.sched_setaffinity(0, {rank % ncpu})

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")

    sample_s = args.sample_cpu_ms / 1000.0

    class Work(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 10**9

        def __getitem__(self, i: int) -> torch.Tensor:
            _busy(sample_s)
            return torch.ones(64)

    loader = DataLoader(Work(), batch_size=4, num_workers=2, persistent_workers=True)
    batches = iter(loader)
    model = torch.nn.Linear(64, 64)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if args.mode == "ddp" else None
    grad = torch.zeros(1 << 14)
    log = open(f"{args.out}.{rank}", "w", buffering=1)
    announced = False
    while True:
        a = time.time()
        x = next(batches)
        b = time.time()
        time.sleep(args.step_ms / 1000.0)
        c = time.time()
        if ddp is not None:
            ddp(x).sum().backward()
        else:
            dist.all_reduce(grad)
        d = time.time()
        log.write(f"{a:.6f} {b:.6f} {c:.6f} {d:.6f}\n")
        if not announced:
            Path(f"{args.out}.{rank}.pid").write_text(str(os.getpid()))
            announced = True


def read_spans(path: Path) -> list[tuple[float, float, float, float]]:
    """A rank's step lines (the last may be half-written)."""
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            a, b, c, d = map(float, parts)
            rows.append((a, b, c, d))
    return rows


def share(spans: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """% of [t0, t1] covered by the spans."""
    covered = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans)
    return 100.0 * covered / (t1 - t0)


@contextmanager
def rank_job(
    directory: Path, nproc: int, args: Sequence[str] = (), timeout_s: float = 180.0
) -> Iterator[tuple[int, list[int], Path]]:
    """A torchrun job of ``nproc`` gloo ranks, running; yields (torchrun's pid, each rank's
    pid by rank, the log prefix). Everything it started is killed afterwards."""
    out = directory / "ranks"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc_per_node={nproc}", os.path.abspath(__file__), "--out", str(out), *args]
    p = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        pid_files = [Path(f"{out}.{r}.pid") for r in range(nproc)]
        deadline = time.monotonic() + timeout_s
        while not all(f.exists() and f.read_text() for f in pid_files):
            assert p.poll() is None, p.stderr.read() if p.stderr else "torchrun exited"
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        yield p.pid, [int(f.read_text()) for f in pid_files], out
    finally:
        # torchrun starts each rank in a session of its own: its group is not torchrun's.
        ranks = _children(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        for pid in ranks:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        p.wait()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with suppress(OSError):
                stat = Path(f"/proc/{name}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(name))
    return out


if __name__ == "__main__":
    sys.exit(main())
