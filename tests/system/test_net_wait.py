"""A client of a slow TCP server, watched by the eBPF probe: its main thread's share of
time blocked until network receive processing woke it (``net_wait_pct``) is what its own
clock says it spent inside requests.

The server (tests/netutil.py) answers each request after a set delay, over loopback: its
reply is received in the NET_RX softirq (run where the server sent it), which wakes the
client blocked in ``recv``. Between requests the client sleeps on a timer (an interrupt's
wake-up, never the network's).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import Intervals, why_no_bcc_probe
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import gputop_cmd
from tests.netutil import CLIENT, slow_server
from tests.recordutil import record_until

pytestmark = pytest.mark.root

DELAY_S = 0.012  # the server's answer: ~60 % of the client's time with the gap below
GAP_S = 0.008
POINTS = 5.0
BPF_FRAMES = 12  # 6 s at 0.5 s
SKIP_FRAMES = 3  # the first ticks: no rates, then the first counts


def _clock_share(log: list[tuple[float, float]], start: float, end: float) -> float:
    """% of [start, end] (monotonic) the client spent inside requests by its own clock (the
    reports nearest each edge)."""
    a = min(log, key=lambda e: abs(e[0] - start))
    b = min(log, key=lambda e: abs(e[0] - end))
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0])


@contextmanager
def _client() -> Iterator[tuple[subprocess.Popen[str], list[tuple[float, float]]]]:
    """A client of the slow server, and its reports (monotonic time, total inside s) so far."""
    with slow_server(DELAY_S) as (host, port):
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, host, str(port), str(GAP_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        log: list[tuple[float, float]] = []

        def drain() -> None:
            assert client.stdout is not None
            for line in client.stdout:
                t, total = line.split()
                log.append((float(t), float(total)))

        th = threading.Thread(target=drain, daemon=True)
        th.start()
        try:
            yield client, log
        finally:
            client.kill()
            client.wait()
            th.join(10)


@pytest.mark.parametrize("loader", ["libbpf", "bcc"])
def test_the_probes_network_wait_is_the_clients_time_inside_requests_with_either_loader(
    loader: str,
) -> None:
    if (why := why_no_bcc_probe()) is not None:
        pytest.skip(why)
    probe = BpfSchedProbe(use_loader=loader)
    probe.open()
    try:
        if not probe.wait_attached(120):
            pytest.fail(f"probe did not attach with {loader}: {probe.status}")
        with _client() as (client, log):
            intervals = Intervals(probe)
            time.sleep(0.5)
            t0 = time.monotonic()
            intervals.read()
            time.sleep(4.0)
            t1 = time.monotonic()
            r = intervals.read()
            time.sleep(0.1)  # a report after the window's end
    finally:
        probe.close()
    assert r is not None and client.pid in r.per_tid, "the client switched, so it has a row"
    main = r.per_tid[client.pid]
    got = 100.0 * main.wait_net_ns / r.dt_ns
    irq = 100.0 * main.wait_irq_ns / r.dt_ns
    clock = _clock_share(log, t0, t1)
    print(
        f"{loader}: network wait {got:.1f} % (probe) vs {clock:.1f} % (its own clock);"
        f" woken by interrupts (its sleeps) {irq:.1f} %"
    )
    assert 40.0 <= clock <= 80.0, f"the server did not hold the requests: {clock:.1f}%"
    assert main.wait_net_ns <= main.blocked_ns
    assert abs(got - clock) <= POINTS, (got, clock, main)
    # Its sleeps between requests are timer wake-ups: interrupts, not the network.
    assert irq >= 10.0, main


def test_a_client_of_a_slow_server_waits_on_the_network_as_long_as_its_requests_take(
    tmp_path: Path,
) -> None:
    if (why := why_no_bcc_probe()) is not None:
        pytest.skip(why)
    with _client() as (client, log):
        fake = FakeNvml(
            tmp_path / "nvml",
            [FakeGpu(util=[30], sm_util=[5], processes=[FakeProc(pid=client.pid)])],
        )
        frames = _record(fake.env())
    bpf = [f for f in frames if f["sources"]["sched"] == "bpf"][SKIP_FRAMES:]
    rows = [p for f in bpf for p in f["processes"] if p["pid"] == client.pid]
    assert len(rows) == len(bpf) >= BPF_FRAMES - SKIP_FRAMES, [f["sources"] for f in frames]
    assert all(p["net_wait_pct"] <= p["blocked_pct"] + 0.5 for p in rows), rows
    assert all(p["io_wait_pct"] < 1.0 for p in rows), rows
    weights = [f["interval"] for f in bpf]
    got = sum(p["net_wait_pct"] * w for p, w in zip(rows, weights, strict=True)) / sum(weights)
    # The frame's t is wall time; the client's reports are monotonic: shift by the offset.
    shift = time.monotonic() - time.time()
    clock = _clock_share(log, bpf[0]["t"] - bpf[0]["interval"] + shift, bpf[-1]["t"] + shift)
    print(f"net_wait_pct {got:.1f} (gputop) vs {clock:.1f} (the client's own clock)")
    assert 40.0 <= clock <= 80.0, f"the server did not hold the requests: {clock:.1f}%"
    assert abs(got - clock) <= POINTS, (got, clock)


def _record(env: dict[str, str]) -> list[dict[str, Any]]:
    seen = [0]

    def enough(frame: dict[str, Any]) -> bool:
        seen[0] += frame["sources"]["sched"] == "bpf"
        return seen[0] >= BPF_FRAMES

    return record_until(gputop_cmd("record", "--interval", "0.5"), enough, env=env)
