"""docs/grafana-dashboard.json reads only what the app exports: every query and variable names
a gauge of `GET metrics/` or a series of an OpenTelemetry instrument as Prometheus names it
(a counter's `_total`, a histogram's `_bucket`, `_count` and `_sum`), and every gauge and every
instrument has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pikku_workflows.observability.gauges import GAUGES
from pikku_workflows.observability.instruments import NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# A metric name in PromQL: our prefix, then words (labels and functions never start with it).
METRIC = re.compile(r"\bpikku_[a-z0-9_]+\b")
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


def exported_series() -> dict[str, str]:
    """Every series name a query may read, to the gauge or instrument it comes from."""
    series = {name: name for name in GAUGES}
    for instrument, (prometheus_name, unit, _, _) in NAMES.items():
        if unit == "s":
            series.update({prometheus_name + suffix: instrument for suffix in HISTOGRAM_SERIES})
        else:
            series[prometheus_name] = instrument
    return series


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    found += [
        variable["definition"]
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return found


def test_grafana__instrument_series_follow_prometheus_naming() -> None:
    # The names NAMES declares are what Prometheus writes for an OpenTelemetry instrument:
    # dots to underscores, then the unit (`_seconds`) or, for a counter, `_total`.
    for instrument, (prometheus_name, unit, _, _) in NAMES.items():
        base = instrument.replace(".", "_")
        assert prometheus_name == (f"{base}_seconds" if unit == "s" else f"{base}_total")


def test_grafana__every_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    for query in queries(dashboard):
        named = set(METRIC.findall(query))
        assert named, query
        assert named <= set(exported), (query, named - set(exported))


def test_grafana__every_gauge_and_instrument_has_a_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    charted = {exported[name] for query in queries(dashboard) for name in METRIC.findall(query)}
    assert charted == set(GAUGES) | set(NAMES)


def test_grafana__histogram_panels_take_quantiles_by_bucket_bound() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    for query in queries(dashboard):
        if "_bucket" in query:
            assert query.startswith("histogram_quantile("), query
            assert re.search(r"sum by \(le\b", query), query


def test_grafana__panels_have_unique_ids_and_read_the_chosen_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
