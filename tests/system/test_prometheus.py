"""The shipped rules, docs and dashboard against the real Prometheus tools (Debian's
`prometheus` package): promtool checks and unit tests, and a real server on loopback
scraping `gputop export --demo` that must return data for every documented query."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT
from tests.promutil import DOC, RULE_TESTS, RULES, dashboard_queries, doc_queries

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (apt prometheus)")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs prometheus (apt prometheus)"
)
# Queries that only return data when the eBPF probe measured the wait split.
WAIT_SPLIT = "gputop_process_wait_percent"


def _promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _alerts() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)", RULES.read_text(), re.M)


def _records() -> list[str]:
    return re.findall(r"^\s*- record: (\S+)", RULES.read_text(), re.M)


RANGE = "5m"
PRICE = 3.5


def _concrete(query: str) -> str:
    """A dashboard query with its variables filled in as Grafana's "All" does, the time
    range's ``$__range`` and a price."""
    return query.replace("$Hostname", ".*").replace("$__range", RANGE).replace("$price", str(PRICE))


@needs_promtool
def test_rules_file_passes_promtool_check() -> None:
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(_alerts()) + len(_records())} rules found" in r.stdout


@needs_promtool
def test_every_alert_is_unit_tested_to_fire_and_to_hold_off() -> None:
    r = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout
    cases = re.findall(
        r"alertname: (\w+)\n\s*exp_alerts:(.*?)(?=\n\s*- eval_time:|\n\s*- interval:|\Z)",
        RULE_TESTS.read_text(),
        re.S,
    )
    fires = {name for name, body in cases if "exp_labels" in body}
    holds = {name for name, body in cases if body.strip().startswith("[]")}
    assert set(_alerts()) == {
        "GpuBusyButStarving",
        "GpuInputBound",
        "GpuThrottled",
        "GpuLowSmEfficiency",
        "GpuLost",
        "GputopStale",
        "GputopDown",
        "GputopStragglingRank",
    }
    for alert in _alerts():
        assert alert in fires, f"{alert}: no test where it fires"
        assert alert in holds, f"{alert}: no test where it must not fire yet"
    tested = RULE_TESTS.read_text()
    for record in _records():
        assert f"expr: {record}\n" in tested, f"{record}: no promql_expr_test"


@needs_promtool
def test_every_rule_group_in_the_docs_is_valid(tmp_path: Path) -> None:
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if "rules:" in b]
    assert blocks, "docs/prometheus.md shows an alert rule"
    for i, block in enumerate(blocks):
        path = tmp_path / f"doc{i}.yml"
        path.write_text(block)
        r = _promtool("check", "rules", str(path))
        assert r.returncode == 0, block + r.stdout + r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _query(base: str, q: str) -> list[Any]:
    body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    assert body["status"] == "success", (q, body)
    result: list[Any] = body["data"]["result"]
    return result


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real Prometheus (1 s scrapes and rule evaluations, the shipped rules) scraping a
    real `gputop export --demo cpu-contention`; yields (Prometheus URL, exporter target)."""
    assert PROMETHEUS is not None
    tmp = tmp_path_factory.mktemp("prom")
    exporter = subprocess.Popen(
        [
            *(sys.executable, "-m", "gputop", "export", "--demo", "cpu-contention"),
            *("--listen", "127.0.0.1:0", "--interval", "0.5", "--host-label", "node-under-test"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = None
    try:
        assert exporter.stdout is not None
        m = re.search(r"http://(127\.0\.0\.1:\d+)/metrics", exporter.stdout.readline())
        assert m, exporter.stderr.read() if exporter.stderr else ""
        target = m.group(1)
        (tmp / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n  - job_name: gputop\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = _free_port()
        server = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "prometheus.log").open("w"),
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if _query(base, 'up{job="gputop"} == 1'):
                    break
            except OSError:
                pass
            assert server.poll() is None, (tmp / "prometheus.log").read_text()
            assert time.monotonic() < deadline, (tmp / "prometheus.log").read_text()
            time.sleep(0.3)
        yield base, target
    finally:
        for p in (server, exporter):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)


def _wait_for_data(base: str, q: str, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        result = _query(base, q)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


@needs_prometheus
def test_real_prometheus_returns_data_for_every_documented_and_dashboard_query(
    prometheus: tuple[str, str],
) -> None:
    base, _target = prometheus
    # The demo reaches its busy_but_starving verdict after the diagnosis window fills.
    assert _wait_for_data(base, 'gputop_verdict{state="busy_but_starving"} == 1', 90)
    queries = dict.fromkeys([*doc_queries(), *dashboard_queries(), *_records()])
    wait_split = bool(_query(base, WAIT_SPLIT))
    empty = []
    for q in queries:
        if WAIT_SPLIT in q and not wait_split:
            continue  # the demo runs without the eBPF wait split
        result = _wait_for_data(base, _concrete(q), 30)
        if not result:
            empty.append(q)
        for series in result:
            if "Hostname" in series["metric"]:
                assert series["metric"]["Hostname"] == "node-under-test", (q, series)
    assert not empty, f"no data for: {empty}"
    starving = _query(base, 'count(gputop_verdict{state="busy_but_starving"} == 1)')
    assert starving[0]["value"][1] == "1"


@needs_promtool
@needs_prometheus
def test_promtool_lints_only_the_dcgm_exporter_label_names(prometheus: tuple[str, str]) -> None:
    """`promtool check metrics` on a real scrape: its only finding is the camelCase of
    Hostname/UUID/modelName, dcgm-exporter's label names, kept so joins need no rewriting."""
    _base, target = prometheus
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
        body = r.read()
    assert PROMTOOL is not None
    lint = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    findings = [line for line in lint.stderr.decode().splitlines() if line.strip()]
    assert findings, "the GPU series carry dcgm-exporter's camelCase labels"
    for line in findings:
        assert line.endswith("label names should be written in 'snake_case' not 'camelCase'")
        assert line.split()[0].startswith(("gputop_gpu_", "gputop_verdict")), line


@needs_prometheus
def test_real_prometheus_evaluates_every_rule_without_error(
    prometheus: tuple[str, str],
) -> None:
    base, _target = prometheus
    deadline = time.monotonic() + 30
    while True:
        groups = _get(f"{base}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    names = {r["name"] for r in rules}
    assert names == set(_alerts()) | set(_records())
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    # The starving demo puts GpuBusyButStarving into its `for` wait, not straight to firing.
    deadline = time.monotonic() + 60
    while True:
        alerts = _get(f"{base}/api/v1/alerts")["data"]["alerts"]
        starving = [a for a in alerts if a["labels"]["alertname"] == "GpuBusyButStarving"]
        if starving:
            break
        assert time.monotonic() < deadline, alerts
        time.sleep(0.5)
    assert starving[0]["state"] == "pending"
    assert starving[0]["labels"]["UUID"].startswith("GPU-")
    assert starving[0]["labels"]["modelName"]


LOST = "gputop_gpu_lost_seconds_total"


def _lost_panels() -> tuple[str, str]:
    """The dashboard's "GPU-hours lost by cause" query and its cost at the price."""
    (hours,) = [q for q in dashboard_queries() if LOST in q and "$price" not in q]
    (money,) = [q for q in dashboard_queries() if LOST in q and "$price" in q]
    return hours, money


def _by_cause(result: list[Any]) -> dict[str, float]:
    return {r["metric"]["cause"]: float(r["value"][1]) for r in result}


@needs_prometheus
def test_the_lost_gpu_hours_panel_returns_the_per_cause_sum_of_the_scraped_counters(
    prometheus: tuple[str, str],
) -> None:
    base, target = prometheus
    # The starving demo's GPU loses time to CPU contention once its verdict holds; five
    # scrapes of it growing make a range for increase().
    growing = f'count_over_time({LOST}{{cause="cpu_contention"}}[{RANGE}]) >= 5'
    assert _wait_for_data(base, growing, 90)
    hours, money = _lost_panels()
    at = f"{time.time():.3f}"

    def query(q: str) -> list[Any]:
        body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q, "time": at}))
        assert body["status"] == "success", (q, body)
        result: list[Any] = body["data"]["result"]
        return result

    # What each series grew by over the range, as Prometheus scraped it, summed by cause.
    grew: dict[str, float] = {}
    n: dict[str, int] = {}
    for r in query(f"{LOST}[{RANGE}]"):
        assert r["metric"]["Hostname"] == "node-under-test"
        values = [float(v) for _, v in r["values"]]
        cause = r["metric"]["cause"]
        grew[cause] = grew.get(cause, 0.0) + (values[-1] - values[0]) / 3600.0
        n[cause] = n.get(cause, 0) + 1
    panel = _by_cause(query(_concrete(hours)))
    print(f"panel {panel} vs what the counters grew, summed by cause: {grew} (GPU-hours)")
    assert set(panel) == set(grew), (panel, grew)
    assert grew["cpu_contention"] > 0 and panel["cpu_contention"] > 0
    for cause, h in grew.items():
        # increase() extrapolates toward the range's ends, half a scrape interval (1 s) at
        # each; a GPU loses at most 1 s a second.
        assert abs(panel[cause] - h) <= n[cause] * 1.0 / 3600.0, (cause, panel[cause], h)
    cost = _by_cause(query(_concrete(money)))
    for cause, h in panel.items():
        assert cost[cause] == pytest.approx(h * PRICE), (cause, cost, panel)
    # The exporter's own text says it is a counter.
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
        assert f"# TYPE {LOST} counter" in r.read().decode()


@needs_promtool
def test_the_lost_gpu_hours_panel_adds_up_each_cause_across_a_fleet(tmp_path: Path) -> None:
    """Two nodes, three GPUs, two causes, ten minutes: the panel's query, run by promtool's
    engine, gives each cause's GPU-hours summed over every GPU of the fleet."""
    hours, money = _lost_panels()
    fleet = {
        ("node-a", "0", "cpu_contention"): 30,  # GPU-seconds lost per minute
        ("node-a", "1", "cpu_contention"): 12,
        ("node-b", "0", "cpu_contention"): 6,
        ("node-b", "0", "cpu_limit"): 60,
    }
    series = "\n".join(
        f'      - series: \'{LOST}{{Hostname="{h}",gpu="{g}",cause="{c}"}}\'\n'
        f"        values: '0+{per_min}x10'"
        for (h, g, c), per_min in fleet.items()
    )
    contention_h = (30 + 12 + 6) * 10 / 3600
    limit_h = 60 * 10 / 3600

    def expr(q: str) -> str:
        return q.replace("$Hostname", ".*").replace("$__range", "10m").replace("$price", "3.5")

    tests = f"""rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
{series}
    promql_expr_test:
      - expr: '{expr(hours)}'
        eval_time: 10m
        exp_samples:
          - labels: '{{cause="cpu_contention"}}'
            value: {contention_h!r}
          - labels: '{{cause="cpu_limit"}}'
            value: {limit_h!r}
      - expr: '{expr(money)}'
        eval_time: 10m
        exp_samples:
          - labels: '{{cause="cpu_contention"}}'
            value: {contention_h * 3.5!r}
          - labels: '{{cause="cpu_limit"}}'
            value: {limit_h * 3.5!r}
      - expr: '{expr(hours).replace(".*", "node-b")}'
        eval_time: 10m
        exp_samples:
          - labels: '{{cause="cpu_contention"}}'
            value: {6 * 10 / 3600!r}
          - labels: '{{cause="cpu_limit"}}'
            value: {limit_h!r}
"""
    (tmp_path / "lost.test.yml").write_text(tests)
    r = _promtool("test", "rules", "lost.test.yml", cwd=tmp_path)
    assert r.returncode == 0, tests + r.stdout + r.stderr
    assert "SUCCESS" in r.stdout
