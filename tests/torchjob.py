"""A real PyTorch training loop with DataLoader workers, for tests that need one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

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
