"""Helpers for the graph unit tests: definitions written briefly."""

from __future__ import annotations

from typing import Any

from pikku_workflows.graph import GraphDefinition, parse_definition


def graph(nodes: dict[str, Any], entry: Any = None) -> GraphDefinition:
    """A parsed definition; the entry defaults to the first node written."""
    return parse_definition({"entry": entry or next(iter(nodes)), "nodes": nodes})


def fn(next_: Any = None, **options: Any) -> dict[str, Any]:
    """A function node's options (function "f"), with `next` when given."""
    node: dict[str, Any] = {"function": "f", **options}
    if next_ is not None:
        node["next"] = next_
    return node
