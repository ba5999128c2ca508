"""Record the verdicts a user reads: the last frame of every built-in demo and of 8 fake GPUs.

    python scripts/record_demo_frames.py               # every demo, 14 s each (root: all of them)
    python scripts/record_demo_frames.py --seconds 20

Each scenario runs for real through ``gputop record`` (a demo's host workload and modelled GPU;
8 GPUs of the C fake NVML in ``tests/fakenvml``, all at GPU_UTIL 97% and SM activity 12%), and
its last frame (threads left out) is one line of ``tests/demo_frames.jsonl``:
``{"scenario": NAME, "frame": {...}}``. The screen tests (tests/functional/test_verdict_reach.py)
draw these verdicts at 80x24 and 120x40 and check that the first fix shows without a key and
that every line can be scrolled to. Run it again after changing the verdicts' wording. CPU-heavy
(the demos run CPU hogs): on the shared machine, through /work/shared/tools/heavy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

OUT = ROOT / "tests" / "demo_frames.jsonl"


def record(args: list[str], seconds: float, env: dict[str, str] | None = None) -> dict[str, object]:
    """The last frame ``gputop record`` wrote over ``seconds``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "frames.jsonl"
        cmd = [sys.executable, "-m", "gputop", "record", *args]
        cmd += ["--duration", str(seconds), "-o", str(out)]
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, timeout=seconds + 120)
        lines = out.read_text().splitlines()
    frame: dict[str, object] = json.loads(lines[-1])
    return frame


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=14.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from gputop.demo import SCENARIOS
    from tests.fakenvml import FakeGpu, FakeNvml

    rows = []
    for name in SCENARIOS:
        rows.append({"scenario": name, "frame": record(["--demo", name], args.seconds)})
        print(name, file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        gpus = [FakeGpu(util=[97], sm_util=[12], power_w=[140]) for _ in range(8)]
        env = {**os.environ, **FakeNvml(Path(tmp), gpus).env()}
        rows.append({"scenario": "8-gpus", "frame": record([], args.seconds, env)})
    args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print(args.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
