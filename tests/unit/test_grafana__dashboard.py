"""docs/grafana-dashboard.json reads only what `GET metrics/` exports: every query and variable
names an exported metric and nothing else, and every exported metric has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pikku_workflows.observability.gauges import GAUGES

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# A metric name in PromQL: our prefix, then words (labels and functions never start with it).
METRIC = re.compile(r"\bpikku_[a-z0-9_]+\b")


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    found += [
        variable["definition"]
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return found


def test_grafana__every_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    for query in queries(dashboard):
        named = set(METRIC.findall(query))
        assert named, query
        assert named <= set(GAUGES), (query, named - set(GAUGES))


def test_grafana__every_exported_metric_has_a_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    charted = {name for query in queries(dashboard) for name in METRIC.findall(query)}
    assert charted == set(GAUGES)


def test_grafana__panels_have_unique_ids_and_read_the_chosen_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
