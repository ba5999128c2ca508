"""Cost of one NvmlSource.read() against the fake libnvidia-ml.so.1, with 1 and 8 GPUs.

Run from the repository root:  python bench/nvml_tick.py [--ticks N]

What it measures is gputop's side of a tick: nvidia-ml-py's ctypes marshalling and
gputop's own bookkeeping, plus the NVML calls made (counted by the fake). The fake
answers each call in well under a microsecond; a real driver takes driver locks and
may talk to the GPU, so on real hardware add (calls per tick) x (the driver's cost
per call), typically tens of microseconds each. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.sources.nvml import NvmlSource
from gputop.sources.nvml_gpm import GPM_MIN_GAP_S
from tests.fakenvml import SW_POWER_CAP, FakeGpu, FakeNvml, FakeProc

# (label, refresh process lists every tick, idle seconds before each read)
KINDS = (
    # back to back: hot caches, GPM pairs only every 100 ms (a lower bound)
    ("back to back", False, 0.0),
    # paced like real ticks: every read takes a GPM pair; includes cold-cache wake-up
    ("paced, GPM pair", False, GPM_MIN_GAP_S + 0.002),
    ("paced, + process lists", True, GPM_MIN_GAP_S + 0.002),
)


def devices(n: int) -> list[FakeGpu]:
    me = os.getpid()
    return [
        FakeGpu(
            util=[97],
            sm_util=[12],
            sm_occupancy=[8],
            tensor_util=[3],
            dram_util=[20],
            power_w=[300],
            throttle=[SW_POWER_CAP],
            processes=[FakeProc(pid=me, mem_mib=1000, sm_pct=11)],
        )
        for _ in range(n)
    ]


def measure(
    tmp: Path, n_gpus: int, ticks: int, process_every_tick: bool, gap_s: float
) -> tuple[list[float], list[float], float]:
    fake = FakeNvml(tmp / f"g{n_gpus}-{process_every_tick}-{gap_s}", devices(n_gpus))
    fake.activate()
    src = NvmlSource(process_interval_s=0.0 if process_every_tick else 3600.0)
    src.open()
    try:
        src.read()  # first tick: process lists, first GPM sample
        before = sum(fake.call_count(fn) for fn in _counted(fake))
        costs, cpu = [], []
        for _ in range(ticks):
            if gap_s:
                time.sleep(gap_s)
            t0, c0 = time.perf_counter(), time.thread_time()
            src.read()
            costs.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        calls = sum(fake.call_count(fn) for fn in _counted(fake)) - before
    finally:
        src.close()
    return costs, cpu, calls / ticks


def _counted(fake: FakeNvml) -> list[str]:
    return [
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlGpmSampleGet",
        "nvmlGpmMetricsGet",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetProcessesUtilizationInfo",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=40, help="ticks per configuration")
    args = ap.parse_args()
    print(f"NvmlSource.read() against the fake NVML, {args.ticks} ticks each")
    print("(the fake's cost is not the driver's: see the module docstring)")
    print(
        f"{'GPUs':>4}  {'tick kind':<22} {'wall median us':>14} {'wall p95 us':>11}"
        f" {'CPU median us':>13} {'calls/tick':>10}"
    )
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 8):
            for kind, every, gap_s in KINDS:
                costs, cpu, calls = measure(Path(d), n, args.ticks, every, gap_s)
                us = sorted(c * 1e6 for c in costs)
                p95 = us[min(len(us) - 1, int(0.95 * len(us)))]
                cpu_us = statistics.median(cpu) * 1e6
                print(
                    f"{n:>4}  {kind:<22} {statistics.median(us):>14.0f} {p95:>11.0f}"
                    f" {cpu_us:>13.0f} {calls:>10.1f}"
                )


if __name__ == "__main__":
    main()
