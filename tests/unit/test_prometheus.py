"""Every Grafana dashboard query is a query docs/prometheus.md documents."""

from __future__ import annotations

import json

from tests.promutil import DASHBOARD, dashboard_queries, doc_queries


def test_every_dashboard_query_is_a_documented_tested_query() -> None:
    documented = set(doc_queries())
    missing = [q for q in dashboard_queries() if q not in documented]
    assert not missing, f"dashboard queries not in docs/prometheus.md: {missing}"
    dash = json.loads(DASHBOARD.read_text())
    assert all(p["targets"] for p in dash["panels"])
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "Hostname", "price"}
