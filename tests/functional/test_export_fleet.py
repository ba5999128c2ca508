"""Exporter conventions for fleets, for real: node-exporter's textfile mode (atomic, the same
metrics as HTTP, no port) and a textfile directory that does not exist."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from gputop.export import TEXTFILE_NAME
from tests.harness import ROOT


def _export(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputop", "export", "--no-bpf", "--interval", "0.2", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(cond: object, p: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (callable(cond) and cond()):
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_textfile_mode_writes_the_same_metrics_atomically_and_opens_no_port(
    tmp_path: Path,
) -> None:
    out = tmp_path / "textfile"
    out.mkdir()
    prom = out / TEXTFILE_NAME
    p = _export("--demo", "healthy", "--textfile", str(out), "--host-label", "node-7")
    torn: list[str] = []
    reads = 0
    stop = threading.Event()

    def reader() -> None:
        # node-exporter reads whenever it is scraped: every read must be a whole file.
        nonlocal reads
        while not stop.is_set():
            try:
                text = prom.read_text()
            except FileNotFoundError:
                continue
            reads += 1
            names = {f.name for f in text_string_to_metric_families(text)}
            if not text.endswith("\n") or "gputop_up" not in names:
                torn.append(text)

    try:
        _wait(prom.exists, p)
        t = threading.Thread(target=reader)
        t.start()
        first = prom.stat().st_mtime_ns
        _wait(lambda: prom.stat().st_mtime_ns != first, p)
        time.sleep(1.5)  # several more frames written while the reader reads
        stop.set()
        t.join()
        listening = [
            c for c in psutil.Process(p.pid).net_connections("inet") if c.status == "LISTEN"
        ]
        fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
        # While it runs, a write in progress has its temporary file beside the textfile
        # (written whole, then renamed over it): what must be gone is what it leaves.
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
        leftovers = sorted(os.listdir(out))
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert reads > 10 and not torn
    assert listening == []
    assert leftovers == []
    assert {"gputop_up", "gputop_gpu_utilization_percent", "gputop_verdict"} <= set(fams)
    assert {s.labels["Hostname"] for s in fams["gputop_up"].samples} == {"node-7"}
    assert rc == 128 + signal.SIGTERM
    assert p.stderr is not None and p.stderr.read() == ""
    assert not prom.exists(), "a stopped exporter leaves no values that look current"


def test_textfile_and_http_serve_the_same_metric_families(tmp_path: Path) -> None:
    p = _export("--demo", "healthy", "--textfile", str(tmp_path), "--listen", "127.0.0.1:0")
    try:
        assert p.stdout is not None
        m = re.search(r"(http://127\.0\.0\.1:\d+/metrics)", p.stdout.readline())
        assert m
        prom = tmp_path / TEXTFILE_NAME
        _wait(prom.exists, p)
        with urllib.request.urlopen(m.group(1), timeout=10) as r:
            http = {f.name for f in text_string_to_metric_families(r.read().decode())}
        text = {f.name for f in text_string_to_metric_families(prom.read_text())}
    finally:
        p.terminate()
        p.wait(timeout=30)
    assert text == http


def test_textfile_directory_that_does_not_exist_is_one_line_and_exit_2(tmp_path: Path) -> None:
    p = _export("--textfile", str(tmp_path / "nope"))
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert err == f"gputop: error: --textfile: {tmp_path / 'nope'} is not a directory\n"
