"""The dashboard's SVG charts: marks sized by their values, labels escaped, links kept, and
percentiles computed as PostgreSQL's percentile_cont does."""

from __future__ import annotations

import re

from pikku_workflows.observability.charts import Mark, column_chart, row_chart
from pikku_workflows.observability.dashboard_figures import percentile


def heights(svg: str) -> list[float]:
    return [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]


def test_column_chart__columns_scale_to_the_tallest_stack() -> None:
    svg = column_chart(
        [Mark("09:00", (2.0, 2.0)), Mark("10:00", (1.0, 0.0))], ["completed", "failed"]
    )
    first_completed, first_failed, second_completed, second_failed = heights(svg)
    assert first_completed == first_failed == 2 * second_completed
    assert second_failed == 0
    assert "completed" in svg and "failed" in svg  # the legend


def test_row_chart__labels_escaped_and_links_kept() -> None:
    svg = row_chart([Mark("<script>", (1.0,), "/admin/?a=1&b=2")], ["failed"], "%")
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    assert '<a href="/admin/?a=1&amp;b=2">' in svg


def test_row_chart__an_empty_chart_still_draws() -> None:
    assert row_chart([], ["pending"]).startswith("<svg")
    assert column_chart([], ["started"]).startswith("<svg")


def test_percentile__interpolates_between_values() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.95) == 5.0
    assert percentile([0.0, 10.0], 0.95) == 9.5
