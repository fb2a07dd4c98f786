"""The steps a graph pass reads: every row of the run, except the succeeded items of a long
for_each, read as a count (`SettledItems`), their results only once the node completes. Each
message of a long sequential for_each would otherwise read every item it ran before, and its
in-place budget would go on reading."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from django.db.models import Count, IntegerField, Max, Min, Q, Value
from django.db.models.functions import Cast, Left, Length, StrIndex, Substr

from ...graph import NodeState, SettledItems
from ...models import WorkflowStep
from ...status import StepStatus
from .replay_pass import read_steps

# A for_each with this many items done in a row is read as a count on every pass; below it,
# reading the rows costs as little.
SETTLED_ITEMS_FROM = 100


def read_graph_steps(run_id: Any) -> tuple[dict[str, WorkflowStep], dict[str, SettledItems]]:
    """The run's steps for a graph pass, and the for_each items read as a count by node."""
    counts = succeeded_item_counts(run_id)
    leaving_out = Q(pk__in=[])
    for node in counts:
        leaving_out |= _settled_item_rows(node)
    settled = {
        node: SettledItems(count, partial(_item_results, run_id, node, count))
        for node, count in counts.items()
    }
    return read_steps(run_id, leaving_out=leaving_out), settled


def succeeded_item_counts(run_id: Any) -> dict[str, int]:
    """For each for_each node whose succeeded items (of its first visit) are exactly 0 .. n-1
    with n at least SETTLED_ITEMS_FROM: n. One aggregate over the run's item rows."""
    opening = StrIndex("step_key", Value("["))
    index = Substr("step_key", opening + 1, Length("step_key") - opening - 1)
    items = WorkflowStep.objects.filter(
        run_id=run_id, status=StepStatus.SUCCEEDED, step_key__contains="["
    ).exclude(Q(step_key__contains=":") | Q(step_key__contains="#"))
    rows = (
        items.annotate(node=Left("step_key", opening - 1), index=Cast(index, IntegerField()))
        .values("node")
        .annotate(count=Count("pk"), low=Min("index"), high=Max("index"))
    )
    return {
        row["node"]: row["count"]
        for row in rows
        if row["count"] >= SETTLED_ITEMS_FROM
        and row["low"] == 0
        and row["high"] == row["count"] - 1
    }


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
