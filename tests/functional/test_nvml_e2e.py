"""`gputop record` in a subprocess whose LD_LIBRARY_PATH points at the fake NVML."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.contract import check_frame
from tests.fakenvml import (
    ARCH_AMPERE,
    SW_POWER_CAP,
    FakeGpu,
    FakeNvml,
    FakeProc,
    fake_uuid,
)
from tests.harness import run_gputop


def record(env: dict[str, str], *args: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    out = run_gputop("record", "--no-bpf", *args, env=env, timeout=timeout_s, check=True)
    assert "Traceback" not in out.stderr
    frames = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    for f in frames:
        check_frame(f)
    return frames


def test_record_emits_nvml_values_end_to_end(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    fake = FakeNvml(
        tmp_path,
        [
            FakeGpu(
                util=[97],
                sm_util=[12],
                power_w=[140],
                mem_used_mib=[62000],
                throttle=[SW_POWER_CAP],
                processes=[FakeProc(pid=sleeper.pid, mem_mib=60000, sm_pct=11)],
            )
        ],
    )
    frames = record(fake.env(), "--duration", "2", "--interval", "0.2")
    assert len(frames) >= 5
    last = frames[-1]
    assert last["sources"]["gpu"] == "nvml"
    (gpu,) = last["gpus"]
    assert gpu["uuid"] == fake_uuid(0) and gpu["state"] == "ok"
    assert (gpu["util"], gpu["sm_active"], gpu["power_w"], gpu["power_limit_w"]) == (
        97.0,
        12.0,
        140.0,
        700.0,
    )
    assert (gpu["mem_used_mib"], gpu["mem_total_mib"]) == (62000, 81559)
    assert gpu["throttle"] == ["sw_power_cap"]
    procs = {p["pid"]: p for p in last["processes"]}
    assert sleeper.pid in procs
    p = procs[sleeper.pid]
    assert p["gpus"] == [0] and p["gpu_mem_mib"] == 60000
    assert p["role"] == "trainer"
    counts = fake.counts()
    assert counts["nvmlInitWithFlags"] == 1 and counts["nvmlShutdown"] == 1
    assert counts.get("gpm_pairs_under_100ms", 0) == 0
    # ~2 s of 0.2 s ticks: process lists every ~2 s, not every tick
    assert counts["nvmlDeviceGetComputeRunningProcesses_v3"] <= 2 * 3
    # one utilisation read per tick: the frames plus the sampler's priming tick
    assert counts["nvmlDeviceGetUtilizationRates"] == len(frames) + 1


def test_record_with_eight_gpus(tmp_path: Path) -> None:
    fake = FakeNvml(
        tmp_path,
        [
            FakeGpu(util=[10 * i], sm_util=[i], power_w=[100 + i], lost_at=3 if i == 5 else None)
            for i in range(8)
        ],
    )
    frames = record(fake.env(), "--duration", "1", "--interval", "0.2")
    last = frames[-1]
    assert [g["index"] for g in last["gpus"]] == list(range(8))
    assert [g["uuid"] for g in last["gpus"]] == [fake_uuid(i) for i in range(8)]
    assert [g["state"] for g in last["gpus"]] == ["ok"] * 5 + ["lost"] + ["ok"] * 2
    ok = [g for g in last["gpus"] if g["state"] == "ok"]
    assert all(g["util"] == 10.0 * g["index"] for g in ok)
    assert all(g["sm_active"] == float(g["index"]) for g in ok)
    assert last["gpus"][5]["util"] is None
    assert any("GPU 5" in n and "lost" in n for n in last["sources"]["notes"])


def test_old_driver_without_newer_symbols_uses_the_fallbacks(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    fake = FakeNvml(
        tmp_path,
        [
            FakeGpu(
                arch=ARCH_AMPERE,
                util=[88],
                sm_util=[40],
                throttle=[SW_POWER_CAP],
                processes=[FakeProc(pid=sleeper.pid, mem_mib=3000, sm_pct=25)],
            )
        ],
        old_driver=True,
    )
    frames = record(fake.env(), "--duration", "1", "--interval", "0.2")
    last = frames[-1]
    (gpu,) = last["gpus"]
    assert gpu["util"] == 88.0 and gpu["sm_active"] is None
    assert gpu["throttle"] == ["sw_power_cap"]
    p = {p["pid"]: p for p in last["processes"]}[sleeper.pid]
    assert p["gpu_mem_mib"] == 3000 and p["gpu_sm_pct"] == 25.0
    notes = " ".join(last["sources"]["notes"])
    assert "SM activity n/a" in notes and "too old for GPM" in notes
    counts = fake.counts()
    assert counts["nvmlDeviceGetCurrentClocksThrottleReasons"] >= 5
    assert counts["nvmlDeviceGetComputeRunningProcesses_v2"] >= 1
    assert counts["nvmlDeviceGetProcessUtilization"] >= 1


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="a real NVML is installed here"
)
def test_without_an_nvml_library_record_runs_in_no_gpu_mode(tmp_path: Path) -> None:
    fake = FakeNvml(tmp_path, [FakeGpu()])
    env = fake.env()
    env["LD_LIBRARY_PATH"] = str(tmp_path / "empty")  # no libnvidia-ml.so.1 on the path
    frames = record(env, "--duration", "0.5", "--interval", "0.2")
    assert frames and all(f["sources"]["gpu"] == "none" and f["gpus"] == [] for f in frames)
    assert any("libnvidia-ml.so.1 not found" in n for n in frames[-1]["sources"]["notes"])
    assert frames[-1]["host"]["ncpu"] >= 1  # host side keeps working
