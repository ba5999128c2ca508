"""SM activity from dcgm-exporter where GPM is missing: its text format served by a real
local HTTP server, matched by UUID to GPUs read through the real nvidia-ml-py on the fake
NVML; GPM stays first; a missing field, a stale endpoint and a stranger UUID."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.dcgm import DcgmFill, DcgmReader
from gputop.sources.nvml import NvmlSource
from tests.dcgmutil import dcgm_page
from tests.fakenvml import ARCH_AMPERE, FakeGpu, FakeNvml, fake_uuid
from tests.harness import ROOT


class DcgmServer:
    """A real HTTP server on loopback serving whatever page the test sets; it can hang."""

    def __init__(self) -> None:
        self.page = ""
        self.hang_s = 0.0
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                if outer.hang_s:
                    time.sleep(outer.hang_s)
                body = outer.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[DcgmServer]:
    s = DcgmServer()
    yield s
    s.close()


A100, H100 = fake_uuid(0), fake_uuid(1)


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[FakeNvml]:
    """GPU 0: an A100 without GPM; GPU 1: an H100 with GPM (SM 12 %)."""
    saved = {k: os.environ.get(k) for k in ("FAKE_NVML_SCENARIO", "FAKE_NVML_COUNTS")}
    fake = FakeNvml(
        tmp_path / "fake",
        [
            FakeGpu(name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, gpm=False, util=[90]),
            FakeGpu(util=[97], sm_util=[12]),
        ],
    )
    fake.activate()
    yield fake
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _source(url: str, auto: bool = False, **kw: float) -> DcgmFill:
    src = DcgmFill(NvmlSource(), DcgmReader(url, interval_s=0.1, **kw), auto=auto)
    src.open()
    return src


def _until(src: DcgmFill, cond: object, timeout_s: float = 20.0) -> tuple:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    while True:
        gpus = src.read().gpus
        if callable(cond) and cond(gpus):
            return gpus
        assert time.monotonic() < deadline, (gpus, src.status)
        time.sleep(0.12)


def test_dcgm_fills_sm_activity_where_gpm_is_missing_and_gpm_stays_first(
    nvml: FakeNvml, server: DcgmServer
) -> None:
    server.page = dcgm_page(
        {
            A100: {
                "DCGM_FI_PROF_SM_ACTIVE": 0.25,
                "DCGM_FI_PROF_SM_OCCUPANCY": 0.2,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.1,
                "DCGM_FI_PROF_DRAM_ACTIVE": 0.5,
            },
            H100: {"DCGM_FI_PROF_SM_ACTIVE": 0.99},
        }
    )
    src = _source(server.url)
    try:
        gpus = _until(src, lambda g: g[0].sm_active is not None and g[1].sm_active is not None)
        reason = src.status.reason
    finally:
        src.close()
    a100, h100 = gpus
    assert (a100.sm_active, a100.sm_occupancy, a100.tensor_active, a100.dram_active) == (
        25.0,
        20.0,
        10.0,
        50.0,
    )
    assert a100.sm_source == "dcgm" and a100.util == 90.0
    assert (h100.sm_active, h100.sm_source) == (12.0, "gpm")  # not DCGM's 99
    assert server.hits >= 1
    assert f"GPU 0: SM activity from dcgm-exporter at {server.url}" in (reason or "")


def test_a_gpu_missing_from_the_page_stays_na_and_the_status_says_so(
    nvml: FakeNvml, server: DcgmServer
) -> None:
    server.page = dcgm_page({A100: {"DCGM_FI_DEV_GPU_UTIL": 90}})  # no profiling fields
    src = _source(server.url)
    try:
        _until(src, lambda _g: server.hits >= 2)
        gpus = src.read().gpus
        reason = src.status.reason or ""
    finally:
        src.close()
    assert gpus[0].sm_active is None and gpus[0].sm_source is None
    assert f"{server.url} has no SM activity for GPU 0" in reason


def test_a_uuid_that_matches_no_gpu_is_not_used_and_is_named(
    nvml: FakeNvml, server: DcgmServer
) -> None:
    server.page = dcgm_page(
        {"GPU-00000000-dead-beef-0000-000000000000": {"DCGM_FI_PROF_SM_ACTIVE": 0.5}}
    )
    src = _source(server.url)
    try:
        _until(src, lambda _g: server.hits >= 2)
        gpus = src.read().gpus
        reason = src.status.reason or ""
    finally:
        src.close()
    assert [g.sm_active for g in gpus] == [None, gpus[1].sm_active]
    assert gpus[0].sm_source is None
    assert "GPU-00000000-dead-beef-0000-000000000000" in reason
    assert "does not list" in reason


@pytest.mark.parametrize("auto", [False, True], ids=["--dcgm", "auto-detected"])
def test_a_stale_endpoint_drops_its_values_instead_of_showing_old_ones(
    nvml: FakeNvml, server: DcgmServer, auto: bool
) -> None:
    server.page = dcgm_page({A100: {"DCGM_FI_PROF_SM_ACTIVE": 0.25}})
    src = _source(server.url, auto=auto, stale_after_s=1.0, timeout_s=0.3)
    try:
        _until(src, lambda g: g[0].sm_active == 25.0)
        server.hang_s = 5.0  # the exporter stops answering in time
        started = time.monotonic()
        gpus = _until(src, lambda g: g[0].sm_active is None)
        took = time.monotonic() - started
        reason = src.status.reason or ""
        # a read never waits for the hung exporter
        t0 = time.monotonic()
        src.read()
        read_s = time.monotonic() - t0
    finally:
        server.hang_s = 0.0
        src.close()
    assert gpus[0].sm_source is None
    assert "last answer" in reason and "timed out" in reason
    assert took < 10.0
    assert read_s < 0.3


def test_auto_detection_without_an_exporter_says_how_to_name_one(nvml: FakeNvml) -> None:
    src = DcgmFill(
        NvmlSource(), DcgmReader("http://127.0.0.1:9/metrics", interval_s=0.1), auto=True
    )
    src.open()
    try:
        _until(src, lambda _g: "no dcgm-exporter" in (src.status.reason or ""))
        gpus = src.read().gpus
    finally:
        src.close()
    assert gpus[0].sm_active is None
    assert "--dcgm URL" in (src.status.reason or "")


def test_record_with_dcgm_reports_the_sm_source_in_frames(
    tmp_path: Path, server: DcgmServer
) -> None:
    fake = FakeNvml(
        tmp_path / "fake",
        [FakeGpu(name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, gpm=False, util=[90])],
    )
    server.page = dcgm_page({fake_uuid(0): {"DCGM_FI_PROF_SM_ACTIVE": 0.3}})
    env = dict(fake.env(), PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [
            *(sys.executable, "-m", "gputop", "record", "--no-bpf", "--dcgm", server.url),
            *("--duration", "2", "--interval", "0.25"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    gpus = [json.loads(line)["gpus"][0] for line in r.stdout.splitlines()]
    assert gpus[-1]["sm_active"] == 30.0 and gpus[-1]["sm_source"] == "dcgm"


@pytest.mark.parametrize("bad", ["localhost:9400", "ftp://x/metrics", "http://"])
def test_a_bad_dcgm_url_is_one_line_and_exit_2(bad: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gputop", "record", "--dcgm", bad, "--duration", "1"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("gputop: error: ") and r.stderr.count("\n") == 1


class _CountingReader(DcgmReader):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fetches = 0

    def fetch_once(self) -> None:
        self.fetches += 1
        super().fetch_once()


def test_an_exporter_nobody_named_is_looked_for_seldom_until_it_answers(
    server: DcgmServer,
) -> None:
    absent = _CountingReader("http://127.0.0.1:9/metrics", interval_s=0.1, absent_retry_s=30.0)
    present = _CountingReader(server.url, interval_s=0.1, absent_retry_s=30.0)
    server.page = dcgm_page({})
    absent.start()
    present.start()
    try:
        time.sleep(1.0)
    finally:
        absent.close()
        present.close()
    assert absent.fetches == 1
    # Once it answered, every interval.
    assert present.fetches >= 5
