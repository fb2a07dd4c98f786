"""The graph SVG (pure): what a run did at each node, and a drawing that escapes what it shows."""

from __future__ import annotations

import re

from pikku_workflows.admin.graph_svg import node_activity, render_graph
from tests.graph_support import fn, graph


def test_node_activity__counts_visits_items_and_handlers_and_collects_branches():
    definition = graph(
        {
            "a": fn({"again": "b", "done": "c"}, on_error="alert"),
            "b": fn("a"),
            "c": fn(for_each={"$ref": "trigger"}),
            "alert": fn(),
        }
    )
    rows = [
        ("a#1", "succeeded", "done"),
        ("a", "succeeded", "again"),
        ("b", "succeeded", None),
        ("c[1]", "running", None),
        ("c[0]", "succeeded", None),
        ("a#1:onError", "succeeded", None),
        ("__patch:x", "succeeded", None),  # not a node's
    ]

    activity = node_activity(definition, rows)

    assert activity["a"].instances == [("a", "succeeded"), ("a#1", "succeeded")]
    assert activity["a"].branches == {"again", "done"}
    assert (activity["c"].items, activity["c"].succeeded, activity["c"].status) == (
        True,
        1,
        "running",
    )
    assert activity["alert"].instances == [("a#1:onError", "succeeded")]
    assert set(activity) == {"a", "b", "c", "alert"}


def test_render_graph__escapes_node_ids_and_functions():
    definition = graph({"<b>x</b>": fn("y&z"), "y&z": {"function": 'f"><script>'}})

    svg = str(render_graph(definition, title="t<itle"))

    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;b&gt;x&lt;/b&gt;" in svg and "y&amp;z" in svg
    assert "t&lt;itle" in svg


def test_render_graph__without_a_run_every_node_is_not_run_and_nothing_is_bold():
    definition = graph({"a": fn({"x": "b", "y": "c"}), "b": fn(), "c": fn()})

    svg = str(render_graph(definition))

    assert re.findall(r"pikku-node-([\w-]+)", svg) == ["not-run"] * 3
    assert "pikku-edge-taken" not in svg
    assert "pikku-graph-legend" not in svg
