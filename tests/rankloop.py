"""Ground truth for collective waits: a gloo job whose ranks time themselves.

Started as torchrun starts its ranks (``rank_job()`` launches it), each rank pins itself
(and so its gloo threads and DataLoader workers, started after) to one CPU, trains with 2
real DataLoader workers whose samples cost ``--sample-cpu-ms`` of CPU, sleeps ``--step-ms``
as its GPU step, then meets the other ranks: an explicit ``all_reduce`` (``--mode allreduce``) or a
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
import socket
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
) -> Iterator[tuple[list[int], Path]]:
    """A gloo job of ``nproc`` ranks, running; yields (each rank's pid by rank, the log
    prefix). Everything it started is killed afterwards.

    Each rank is started as torchrun starts it: exec'd with the environment torchrun gives
    a rank (RANK, WORLD_SIZE, MASTER_ADDR:MASTER_PORT, TORCHELASTIC_RUN_ID..., which gputop
    reads from /proc/PID/environ), in a session of its own. Not through torchrun itself,
    which imports torch before starting them (3.5 s of a CPU here): nothing here is about
    the launcher. Not forked from tests/preloaded.py's zygote either: a fork's
    /proc/PID/environ is its parent's, whatever it sets.
    """
    out = directory / "ranks"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "TORCHELASTIC_RUN_ID": f"rankloop-{os.getpid()}-{port}",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, os.path.abspath(__file__), "--out", str(out), *args]
    ranks: list[subprocess.Popen[bytes]] = []
    try:
        for r in range(nproc):
            env = {**job, "RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)}
            with open(f"{out}.{r}.err", "wb") as err:
                ranks.append(
                    subprocess.Popen(
                        cmd,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                    )
                )
        pid_files = [Path(f"{out}.{r}.pid") for r in range(nproc)]
        deadline = time.monotonic() + timeout_s
        while not all(f.exists() and f.read_text() for f in pid_files):
            for r, p in enumerate(ranks):
                assert p.poll() is None, Path(f"{out}.{r}.err").read_text()
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        yield [p.pid for p in ranks], out
    finally:
        # Each rank leads a session (and so a process group) with its DataLoader workers.
        for p in ranks:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in ranks:
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
