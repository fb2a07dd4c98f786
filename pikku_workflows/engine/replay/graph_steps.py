"""The steps a graph pass reads: every row of the run, except the succeeded items of a long
sequential for_each, read as a count (`SettledItems`), their results only once the node
completes. Each message of a long for_each would otherwise read every item it ran before, and
its in-place budget would go on reading."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from django.db.models import Count, Q

from ...graph import GraphDefinition, NodeState, SettledItems
from ...graph.nodes import SEQUENTIAL
from ...models import WorkflowStep
from ...status import StepStatus
from .replay_pass import read_steps

# A for_each with this many items done in a row is read as a count on every pass; below it,
# reading the rows costs as little.
SETTLED_ITEMS_FROM = 100


def read_graph_steps(
    run_id: Any, definition: GraphDefinition
) -> tuple[dict[str, WorkflowStep], dict[str, SettledItems]]:
    """The run's steps for a graph pass, and the for_each items read as a count by node."""
    sequential = [
        node.id for node in definition.nodes.values() if node.for_each and node.mode == SEQUENTIAL
    ]
    counts = succeeded_item_counts(run_id, sequential) if sequential else {}
    leaving_out = Q(pk__in=[])
    for node in counts:
        leaving_out |= _settled_item_rows(node)
    settled = {
        node: SettledItems(count, partial(_item_results, run_id, node, count))
        for node, count in counts.items()
    }
    return read_steps(run_id, leaving_out=leaving_out), settled


def succeeded_item_counts(run_id: Any, nodes: list[str]) -> dict[str, int]:
    """How many items of each sequential for_each node in `nodes` succeeded, where at least
    SETTLED_ITEMS_FROM did; one count over the run's succeeded rows, no row read. A sequential
    item starts only once every item before it succeeded, so n succeeded items are 0 .. n-1."""
    succeeded = WorkflowStep.objects.filter(run_id=run_id, status=StepStatus.SUCCEEDED)
    counted = succeeded.exclude(step_key__contains=":").aggregate(
        **{
            f"node_{position}": Count("pk", filter=Q(step_key__startswith=f"{node}["))
            for position, node in enumerate(nodes)
        }
    )
    counts = {node: counted[f"node_{position}"] for position, node in enumerate(nodes)}
    return {node: count for node, count in counts.items() if count >= SETTLED_ITEMS_FROM}


def _settled_item_rows(node: str) -> Q:
    # Item keys of a first visit are `node[i]`; their handlers' keys hold a `:`.
    items = Q(status=StepStatus.SUCCEEDED, step_key__startswith=f"{node}[")
    return items & ~Q(step_key__contains=":")


def _item_results(run_id: Any, node: str, count: int) -> list[Any]:
    rows = WorkflowStep.objects.filter(_settled_item_rows(node), run_id=run_id)
    by_index = {
        int(key[len(node) + 1 : -1]): result
        for key, result in rows.values_list("step_key", "result")
    }
    return [by_index[index] for index in range(count)]


def node_states(steps: Iterable[WorkflowStep]) -> list[NodeState]:
    """The step rows as the planner reads them."""
    return [
        NodeState(
            key=step.step_key,
            status=step.status,
            attempt=step.attempt,
            attempt_limit=step.attempt_limit,
            result=step.result,
            branch_taken=step.branch_taken,
            from_step_key=step.from_step_key,
            error=step.error,
            data=step.data,
        )
        for step in steps
    ]
