"""The exporter from outside: a frame with every kind of series and what a collector
serves for it, and a live ``gputop export`` scraped over loopback."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gputop.export import FrameCollector
from gputop.model.frame import Frame, GpuSample, HostSample, ProcessSample, Sources, Verdict
from tests.harness import start_gputop


def _proc(
    pid: int, comm: str, role: str, gpus: tuple[int, ...] = (), offcpu: float | None = 51.7
) -> ProcessSample:
    return ProcessSample(
        pid=pid,
        ppid=1,
        comm=comm,
        cmdline=comm,
        role=role,
        trainer_pid=None,
        cpu_pct=40.0,
        offcpu_pct=offcpu,
        runq_pct=30.2,
        preempt_per_s=120.5,
        preempt_total=14504,
        vcsw_per_s=30.0,
        gpus=gpus,
        gpu_mem_mib=1000 if gpus else None,
    )


FRAME = Frame(
    t=1763769600.25,
    interval=1.0,
    sources=Sources("nvml", "bpf"),
    host=HostSample(
        cpu_pct=93.1, ncpu=8, load1=12.3, psi_cpu_some=41.0, mem_used_mib=100, mem_total_mib=200
    ),
    gpus=(
        GpuSample(
            0, "GPU-aaa", "NVIDIA H100", 97.0, 12.0, 140.0, 700.0, 62000, 81559, ("sw_power_cap",)
        ),
        GpuSample(1, "GPU-bbb", "NVIDIA A100", 5.0, None, 60.0, 400.0, 10, 40000),
    ),
    processes=(
        _proc(100, "python3", "trainer", gpus=(0,)),
        _proc(101, "pt_data_worker", "dataloader", offcpu=None),
        _proc(102, "pt_data_pin", "pin_memory"),
        _proc(200, "infer", "other", gpus=(1,)),
        _proc(300, "bash", "other"),
    ),
    verdicts=(
        Verdict(0, "busy_but_starving", ("off-CPU 52%",), cause="cpu_limit"),
        Verdict(1, "idle"),
    ),
)


def scrape_collector(frame: Frame | None) -> dict[str, list[Sample]]:
    """The series a collector for host ``node1`` serves after ``frame`` (none before one)."""
    collector = FrameCollector("node1")
    if frame is not None:
        collector.update(frame)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return families(generate_latest(reg).decode())


def families(text: str) -> dict[str, list[Sample]]:
    """Samples of an exposition text by metric name."""
    out: dict[str, list[Sample]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def one(fams: dict[str, list[Sample]], metric: str, /, **labels: str) -> float:
    """The value of the one sample of ``metric`` with these labels."""
    hits = [
        s.value
        for s in fams.get(metric, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (metric, labels, fams.get(metric))
    return hits[0]


def run_export(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``gputop export ARGS`` started; the caller ends it."""
    return start_gputop("export", *args, env=env)


@contextlib.contextmanager
def exporting(
    env: dict[str, str] | None = None, *extra: str, bpf: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running exporter on a free loopback port and its metrics URL; ended afterwards."""
    sched = () if bpf else ("--no-bpf",)
    p = run_export("--listen", "127.0.0.1:0", "--interval", "0.2", *sched, *extra, env=env)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        m = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", line)
        assert m, (line, p.stderr.read() if p.poll() is not None and p.stderr else "")
        yield p, m.group(1)
    finally:
        if p.poll() is None:
            p.terminate()
        p.wait(timeout=30)


def fetch(url: str) -> str:
    """One scrape."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        body: bytes = r.read()
        return body.decode()


def wait_for_frame(url: str) -> dict[str, list[Sample]]:
    """Scrapes until the exporter has a frame (``gputop_up`` is 1); that scrape's series."""
    deadline = time.monotonic() + 30
    while True:
        fams = families(fetch(url))
        if one(fams, "gputop_up") == 1.0:
            return fams
        assert time.monotonic() < deadline, "no frame within 30 s"
        time.sleep(0.1)
