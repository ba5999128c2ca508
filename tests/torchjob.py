"""A real PyTorch training loop with DataLoader workers, for tests that need one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.preloaded import Child, spawn

# argv[1] is the multiprocessing start method; the rest is ignored (tests pass secrets there).
TRAINER = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 10**9
    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.zeros(4)

if __name__ == "__main__":
    dl = DataLoader(Slow(), num_workers=2, batch_size=8, multiprocessing_context=sys.argv[1])
    it = iter(dl)
    next(it)
    print("ready", flush=True)
    while True:
        next(it)
        time.sleep(0.02)
"""


@contextmanager
def running_trainer(
    directory: Path, start_method: str = "fork", args: Sequence[str] = ()
) -> Iterator[subprocess.Popen[str]]:
    """A trainer with 2 DataLoader workers, ready to be observed; all of it killed after.

    It runs in its own session: a forkserver and its workers outlive a killed
    trainer otherwise.
    """
    script = directory / "train.py"
    script.write_text(TRAINER)
    p = subprocess.Popen(
        [sys.executable, str(script), start_method, *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n"
        yield p
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


# A training loop that measures where its own time goes. argv[1] is a JSON config:
# workers, item_cpu_ms (CPU time a worker spends per sample), batch_size, step_ms
# (the GPU-wait stand-in), step ("sleep": a blocking sync; "spin": CUDA's default
# spin-wait), start_method, persistent, cpus (affinity, optional), cuda_lib (optional:
# the step is then the fake libcuda's cuStreamSynchronize, sleeping or spinning as "step"
# says; tests/fakecuda/). It prints "ready"
# once batches flow, then appends one JSON line per second to argv[2]: cumulative
# seconds spent inside next(iterator) ("input_s") and in the stand-in ("step_s"),
# with perf_counter.
LOOP = """
import json, os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)
if cfg.get("cpus"):
    os.sched_setaffinity(0, cfg["cpus"])  # the workers inherit it

def burn(ms):
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass

class Data(Dataset):
    def __len__(self):
        return 10**9
    def __getitem__(self, i):
        burn(cfg["item_cpu_ms"])
        return torch.zeros(16)

if __name__ == "__main__":
    n = cfg["workers"]
    kw = {}
    if n:
        kw = dict(
            multiprocessing_context=cfg.get("start_method", "fork"),
            persistent_workers=cfg.get("persistent", True),
            prefetch_factor=2,
        )
    dl = DataLoader(Data(), num_workers=n, batch_size=cfg["batch_size"], **kw)
    it = iter(dl)
    next(it)
    sync = None
    if cfg.get("cuda_lib"):
        import ctypes
        cu = ctypes.CDLL(cfg["cuda_lib"])
        cu.fake_cuda_set(ctypes.c_longlong(int(cfg["step_ms"] * 1e6)), int(cfg["step"] == "spin"))
        sync = cu.cuStreamSynchronize
    print("ready", flush=True)
    out = open(sys.argv[2], "a", buffering=1)
    input_s = step_s = 0.0
    t_report = time.perf_counter() + 1.0
    while True:
        t0 = time.perf_counter()
        next(it)
        t1 = time.perf_counter()
        if sync is not None:
            sync(None)
        elif cfg["step"] == "spin":
            end = t1 + cfg["step_ms"] / 1000.0
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(cfg["step_ms"] / 1000.0)
        t2 = time.perf_counter()
        input_s += t1 - t0
        step_s += t2 - t1
        if t2 >= t_report:
            out.write(json.dumps({"t": time.time(), "input_s": input_s, "step_s": step_s}) + "\\n")
            t_report += 1.0
"""


@contextmanager
def running_loop(
    directory: Path, config: dict[str, object], name: str = "loop"
) -> Iterator[tuple[subprocess.Popen[str] | Child, Path]]:
    """The self-measuring training loop (LOOP), ready; yields it and its stats file.

    Same session as the caller: with autogroup scheduling, CPU hogs the caller
    starts then compete with it as the test intends.
    """
    script = directory / f"{name}.py"
    script.write_text(LOOP)
    stats = directory / f"{name}.jsonl"
    argv = [json.dumps(config), str(stats)]
    if config.get("start_method", "fork") != "fork":
        # Their workers import the script as a fresh interpreter's main module.
        p: subprocess.Popen[str] | Child = subprocess.Popen(
            [sys.executable, str(script), *argv], stdout=subprocess.PIPE, text=True
        )
    else:
        p = spawn(str(script), argv)  # torch imported already (tests/preloaded.py)
    try:
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n"
        yield p, stats
    finally:
        kill_tree(p.pid)
        p.wait()


def children(pid: int) -> list[int]:
    """A process's children (DataLoader workers, a forkserver); [] once it is gone."""
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return kids


def descendants(pid: int) -> list[int]:
    """A process's children, their children, and so on."""
    out: list[int] = []
    for k in children(pid):
        out += [k, *descendants(k)]
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL a process's children (DataLoader workers, forkserver) and then it."""
    for k in children(pid):
        kill_tree(k)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def loop_share_pct(stats: Path, t_from: float, t_to: float) -> tuple[float, float]:
    """(% of wall time in next(iterator), % in the GPU stand-in) between two unix times."""
    rows = [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]
    inside = [r for r in rows if t_from <= r["t"] <= t_to]
    if len(inside) < 2:
        raise AssertionError(f"the loop reported {len(inside)} times in the window")
    a, b = inside[0], inside[-1]
    wall = b["t"] - a["t"]
    return 100.0 * (b["input_s"] - a["input_s"]) / wall, 100.0 * (b["step_s"] - a["step_s"]) / wall
