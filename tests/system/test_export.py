"""`gputop export` scraped for real beside CPU hogs (the starving demo), with the eBPF probe
(root) and with a real PyTorch trainer."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gputop.doctor import check_bcc, check_kernel_headers, check_privileges, check_tracefs
from gputop.model.frame import VERDICT_STATES
from tests.exportutil import exporting, one, wait_for_frame
from tests.torchjob import running_trainer

# ---- real processes over loopback ----------------------------------------------------


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


@pytest.mark.torch
def test_a_real_trainer_and_its_workers_are_exported(
    tmp_path: Path, exporter: tuple[subprocess.Popen[str], str]
) -> None:
    with running_trainer(tmp_path) as trainer:
        _p, url = exporter
        # Each worker names itself (pt_data_worker) as it starts: the trainer is one as soon
        # as the first is, and on a loaded machine the second may be named a scrape later.
        deadline = time.monotonic() + 30
        while True:
            fams = wait_for_frame(url)
            samples = fams.get("gputop_process_cpu_percent", [])
            roles = {s.labels["pid"]: s.labels["role"] for s in samples}
            workers = [
                s
                for s in samples
                if s.labels["role"] == "dataloader" and s.labels["comm"] == "pt_data_worker"
            ]
            if roles.get(str(trainer.pid)) == "trainer" and len(workers) >= 2:
                break
            assert time.monotonic() < deadline, (roles, len(workers))
            time.sleep(0.2)
        assert one(fams, "gputop_process_preemptions_total", pid=str(trainer.pid)) >= 0
