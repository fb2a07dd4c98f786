"""The graph workflows `bench/graph_scale.py` runs: a sequential for_each over N items (its item
a step function run in the pass, or a queued one a worker runs in place) and a two-node cycle
(loaded by the worker through PIKKU_EXTRA_WORKFLOW_MODULES=bench.graph_workflows)."""

from __future__ import annotations

from typing import Any

import pikku_workflows as pw

FOR_EACH = "bench.graph.for_each"
FOR_EACH_QUEUED = "bench.graph.for_each_queued"
CYCLE = "bench.graph.cycle"
CYCLE_QUEUED = "bench.graph.cycle_queued"
MAX_ITEMS = 1_000_000


@pw.step_function("bench.graph.items")
def items(data: dict[str, Any], ctx: pw.StepContext) -> list[int]:
    return list(range(data["n"]))


@pw.step_function("bench.graph.item")
def item(data: int, ctx: pw.StepContext) -> int:
    return data


@pw.step_function("bench.graph.item_queued", inline=False)
def item_queued(data: int, ctx: pw.StepContext) -> int:
    return data


@pw.step_function("bench.graph.turn")
def turn(data: Any, ctx: pw.StepContext) -> int:
    ctx.branch("again")  # until max_visits ends the run
    return 0


@pw.step_function("bench.graph.turn_queued", inline=False)
def turn_queued(data: Any, ctx: pw.StepContext) -> int:
    ctx.branch("again")
    return 0


def for_each_graph(item_function: str) -> dict[str, Any]:
    each = {"function": item_function, "for_each": {"$ref": "list"}, "mode": "sequential"}
    return {
        "entry": "list",
        "nodes": {
            "list": {"function": "bench.graph.items", "next": "each"},
            "each": {**each, "max_items": MAX_ITEMS},
        },
    }


def cycle_graph(turn_function: str, visits: int) -> dict[str, Any]:
    node = {"function": turn_function, "max_visits": visits}
    return {
        "entry": "ping",
        "nodes": {"ping": {**node, "next": {"again": "pong"}}, "pong": {**node, "next": "ping"}},
    }


pw.graph_workflow(FOR_EACH, for_each_graph("bench.graph.item"))
pw.graph_workflow(FOR_EACH_QUEUED, for_each_graph("bench.graph.item_queued"))
pw.graph_workflow(CYCLE, cycle_graph("bench.graph.turn", 1000))
pw.graph_workflow(CYCLE_QUEUED, cycle_graph("bench.graph.turn_queued", 1000))
