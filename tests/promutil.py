"""The shipped Prometheus rules and Grafana dashboard, and the queries docs/prometheus.md
documents and the dashboard runs."""

from __future__ import annotations

import json
import re

from tests.harness import ROOT

RULES = ROOT / "deploy" / "prometheus" / "gputop-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "gputop-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "gputop-dashboard.json"
DOC = ROOT / "docs" / "prometheus.md"


def doc_queries() -> list[str]:
    """Each line of each ```promql block of docs/prometheus.md."""
    out = []
    for block in re.findall(r"```promql\n(.*?)```", DOC.read_text(), re.S):
        out += [q.strip() for q in block.splitlines() if q.strip() and not q.startswith("#")]
    return out


def dashboard_queries() -> list[str]:
    """Every panel target's query of the shipped dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]
