"""`gputop export`: Prometheus text exposition of the latest frame, scraped for real."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.exportutil import exporting, families, fetch, one, run_export, wait_for_frame
from tests.fakenvml import ARCH_AMPERE, SW_POWER_CAP, FakeGpu, FakeNvml, FakeProc, fake_uuid

PY = sys.executable


# ---- real processes over loopback ----------------------------------------------------


def test_real_scrape_of_fake_nvml_gpus_and_a_gpu_process(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(
        [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sleeper.stdout is not None and sleeper.stdout.readline() == "ready\n"
    comm = Path(f"/proc/{sleeper.pid}/comm").read_text().strip()
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
            ),
            FakeGpu(name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, gpm=False, util=[55]),
        ],
    )
    try:
        with exporting(fake.env()) as (_p, url):
            fams = wait_for_frame(url)
    finally:
        sleeper.terminate()
        sleeper.wait(timeout=10)
    g0 = {"gpu": "0", "UUID": fake_uuid(0), "modelName": "NVIDIA H100 80GB HBM3"}
    assert one(fams, "gputop_gpu_utilization_percent", **g0) == 97.0
    assert one(fams, "gputop_gpu_sm_active_percent", **g0) == 12.0
    assert one(fams, "gputop_gpu_power_watts", **g0) == 140.0
    assert one(fams, "gputop_gpu_memory_used_bytes", **g0) == 62000 * 2**20
    assert one(fams, "gputop_gpu_throttle_reason", reason="sw_power_cap", **g0) == 1.0
    assert one(fams, "gputop_gpu_utilization_percent", gpu="1", UUID=fake_uuid(1)) == 55.0
    # GPU 1 has no GPM: its SM activity is absent, not 0.
    assert [s.labels["gpu"] for s in fams["gputop_gpu_sm_active_percent"]] == ["0"]
    assert one(fams, "gputop_source_info", gpu_source="nvml") == 1.0
    pid = str(sleeper.pid)
    assert one(fams, "gputop_process_gpu_memory_bytes", pid=pid, role="trainer") == 60000 * 2**20
    assert one(fams, "gputop_process_cpu_percent", pid=pid, comm=comm) >= 0.0


def test_real_scrape_over_loopback(exporter: tuple[subprocess.Popen[str], str]) -> None:
    _p, url = exporter
    fams = wait_for_frame(url)
    host = socket.gethostname()
    assert one(fams, "gputop_host_cpus", Hostname=host) == os.cpu_count()
    assert 0.0 <= one(fams, "gputop_host_cpu_percent") <= 100.0
    assert one(fams, "gputop_source_info", gpu_source="none", sched_source="procfs") == 1.0
    first_t = one(fams, "gputop_frame_timestamp_seconds")
    assert abs(first_t - time.time()) < 30
    time.sleep(0.5)
    assert one(families(fetch(url)), "gputop_frame_timestamp_seconds") > first_t


def test_scrapes_read_the_latest_frame_and_do_not_sample(
    exporter: tuple[subprocess.Popen[str], str],
) -> None:
    _p, url = exporter
    wait_for_frame(url)
    # Ten back-to-back scrapes span far less than ten intervals: a per-scrape sampler
    # would give ten different frames.
    stamps = [one(families(fetch(url)), "gputop_frame_timestamp_seconds") for _ in range(10)]
    assert len(set(stamps)) < 5


def test_sigterm_stops_the_exporter_cleanly(exporter: tuple[subprocess.Popen[str], str]) -> None:
    p, url = exporter
    wait_for_frame(url)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=15) == 128 + signal.SIGTERM
    assert p.stderr is not None and p.stderr.read() == ""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_export("--listen", f"127.0.0.1:{port}")
        _out, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert err == f"gputop: error: cannot listen on 127.0.0.1:{port}: address already in use\n"


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:70000", "no-such-host.invalid:9400"])
def test_a_bad_listen_is_one_line_and_exit_2(listen: str) -> None:
    p = run_export("--listen", listen)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert err.startswith("gputop: error: ") and err.count("\n") == 1
    assert "Traceback" not in err
