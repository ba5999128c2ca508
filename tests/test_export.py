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

from gputop.doctor import check_bcc, check_kernel_headers, check_privileges, check_tracefs
from gputop.errors import UsageError
from gputop.export import parse_listen
from gputop.model.frame import VERDICT_STATES
from tests.exportutil import (
    FRAME,
    exporting,
    families,
    fetch,
    one,
    run_export,
    scrape_collector,
    wait_for_frame,
)
from tests.fakenvml import ARCH_AMPERE, SW_POWER_CAP, FakeGpu, FakeNvml, FakeProc, fake_uuid
from tests.torchjob import running_trainer

PY = sys.executable


def test_gpu_metrics_carry_host_index_and_uuid() -> None:
    f = scrape_collector(FRAME)
    assert (
        one(f, "gputop_gpu_utilization_percent", Hostname="node1", gpu="0", UUID="GPU-aaa") == 97.0
    )
    assert one(f, "gputop_gpu_sm_active_percent", gpu="0") == 12.0
    assert one(f, "gputop_gpu_power_watts", gpu="1", UUID="GPU-bbb") == 60.0
    assert one(f, "gputop_gpu_memory_used_bytes", gpu="0") == 62000 * 2**20
    assert one(f, "gputop_gpu_throttled", gpu="0") == 1.0
    assert one(f, "gputop_gpu_throttled", gpu="1") == 0.0
    assert one(f, "gputop_gpu_throttle_reason", gpu="0", reason="sw_power_cap") == 1.0


def test_sm_active_is_absent_not_zero_when_unknown() -> None:
    f = scrape_collector(FRAME)
    assert [s.labels["gpu"] for s in f["gputop_gpu_sm_active_percent"]] == ["0"]


def test_processes_exported_are_trainers_workers_and_gpu_users() -> None:
    f = scrape_collector(FRAME)
    pids = {s.labels["pid"]: s.labels["role"] for s in f["gputop_process_cpu_percent"]}
    assert pids == {"100": "trainer", "101": "dataloader", "102": "pin_memory", "200": "other"}
    assert one(f, "gputop_process_offcpu_percent", pid="100", comm="python3") == 51.7
    assert "101" not in {s.labels["pid"] for s in f["gputop_process_offcpu_percent"]}
    assert one(f, "gputop_process_runq_percent", pid="101") == 30.2
    assert one(f, "gputop_process_preemptions_per_second", pid="100") == 120.5
    assert one(f, "gputop_process_preemptions_total", pid="100") == 14504
    assert one(f, "gputop_process_gpu_memory_bytes", pid="200") == 1000 * 2**20


def test_verdict_is_one_for_the_current_state_only() -> None:
    f = scrape_collector(FRAME)
    for state in VERDICT_STATES:
        expected = 1.0 if state == "busy_but_starving" else 0.0
        assert one(f, "gputop_verdict", gpu="0", UUID="GPU-aaa", state=state) == expected
    assert one(f, "gputop_verdict", gpu="1", state="idle") == 1.0


def test_host_metrics() -> None:
    f = scrape_collector(FRAME)
    assert one(f, "gputop_host_cpu_percent", Hostname="node1") == 93.1
    assert one(f, "gputop_host_load1") == 12.3
    assert one(f, "gputop_host_psi_cpu_some_percent") == 41.0
    assert "gputop_host_psi_cpu_full_percent" not in f
    assert one(f, "gputop_host_memory_total_bytes") == 200 * 2**20
    assert one(f, "gputop_source_info", gpu_source="nvml", sched_source="bpf") == 1.0


def test_before_the_first_frame_only_up_is_zero() -> None:
    f = scrape_collector(None)
    assert list(f) == ["gputop_up"]
    assert one(f, "gputop_up", Hostname="node1") == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        (":9400", ("0.0.0.0", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    "text", ["9400", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:99999", "::1:9400", ""]
)
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(UsageError, match="--listen"):
        parse_listen(text)


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


def test_the_verdict_gauge_follows_the_diagnosis_of_a_starving_demo() -> None:
    with exporting(None, "--demo", "cpu-contention") as (_p, url):
        deadline = time.monotonic() + 60
        while True:
            fams = wait_for_frame(url)
            current = [s for s in fams.get("gputop_verdict", []) if s.value == 1.0]
            if current and current[0].labels["state"] == "busy_but_starving":
                break
            assert time.monotonic() < deadline, current
            time.sleep(0.3)
    labels = current[0].labels
    assert len(current) == 1
    states = {s.labels["state"]: s.value for s in fams["gputop_verdict"]}
    assert set(states) == set(VERDICT_STATES)
    assert sum(states.values()) == 1.0
    g = {"gpu": labels["gpu"], "UUID": labels["UUID"]}
    util = one(fams, "gputop_gpu_utilization_percent", **g)
    assert one(fams, "gputop_gpu_sm_active_percent", **g) < util / 2
    assert "trainer" in {s.labels["role"] for s in fams["gputop_process_offcpu_percent"]}


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


_CAN_BPF = os.geteuid() == 0 and all(
    c.ok for c in (check_bcc(), check_kernel_headers(), check_privileges(), check_tracefs())
)


@pytest.mark.root
@pytest.mark.skipif(not _CAN_BPF, reason="needs root, bcc, kernel headers and tracefs")
def test_with_the_ebpf_probe_the_export_says_so_and_stops_cleanly() -> None:
    with exporting(bpf=True) as (p, url):
        deadline = time.monotonic() + 60
        while True:
            fams = wait_for_frame(url)
            src = fams["gputop_source_info"][0].labels["sched_source"]
            if src == "bpf":
                break
            assert time.monotonic() < deadline, "probe never attached"
            time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=40) == 128 + signal.SIGTERM
        assert p.stderr is not None and "Traceback" not in p.stderr.read()


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


@pytest.mark.torch
def test_a_real_trainer_and_its_workers_are_exported(
    tmp_path: Path, exporter: tuple[subprocess.Popen[str], str]
) -> None:
    with running_trainer(tmp_path) as trainer:
        _p, url = exporter
        deadline = time.monotonic() + 30
        while True:
            fams = wait_for_frame(url)
            roles = {
                s.labels["pid"]: s.labels["role"]
                for s in fams.get("gputop_process_cpu_percent", [])
            }
            if roles.get(str(trainer.pid)) == "trainer":
                break
            assert time.monotonic() < deadline, roles
            time.sleep(0.2)
        workers = [
            s
            for s in fams["gputop_process_cpu_percent"]
            if s.labels["role"] == "dataloader" and s.labels["comm"] == "pt_data_worker"
        ]
        assert len(workers) >= 2
        assert one(fams, "gputop_process_preemptions_total", pid=str(trainer.pid)) >= 0
