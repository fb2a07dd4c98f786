"""The OpenTelemetry instruments' names: dotted, the unit apart, and the Prometheus name each
becomes (underscores, the unit's suffix, `_total` for a counter) is the one documented on the
Observability page, with its labels."""

from __future__ import annotations

from pathlib import Path

from pikku_workflows.observability.gauges import GAUGES
from pikku_workflows.observability.instruments import NAMES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def prometheus_name(name: str, unit: str) -> str:
    base = name.replace(".", "_")
    return base + "_seconds" if unit == "s" else base + "_total"


def test_instruments__prometheus_names_follow_from_the_opentelemetry_ones() -> None:
    for name, (prometheus, unit, _, _) in NAMES.items():
        assert name.startswith("pikku.") and "_total" not in name and "seconds" not in name
        assert unit == "s" or (unit.startswith("{") and unit.endswith("}")), name
        assert prometheus == prometheus_name(name, unit)
        assert prometheus not in GAUGES


def test_instruments__each_has_its_row_on_the_observability_page() -> None:
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `pikku.")]
    assert len(rows) == len(NAMES)
    for name, (prometheus, unit, labels, _) in NAMES.items():
        (row,) = [row for row in rows if row.startswith(f"| `{name}` ")]
        assert f"`{prometheus}`" in row and f"`{unit}`" in row
        for label in labels:
            assert f"`{label}`" in row
