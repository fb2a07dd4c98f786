"""A long sequential for_each through the engine: each pass reads the items already done as a
count, not row by row (so a message's in-place budget is not spent re-reading them), and the
node's result is still every item's result in order once it completes."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.graph_steps import read_graph_steps
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ITEMS = 200
FAILING_FROM = 150


@pytest.fixture
def failing_from() -> list[int]:
    """`long.each`: a sequential for_each doubling each item of the run input, whose item
    function fails from index `failing_from[0]` on (a retry an hour later)."""
    threshold = [FAILING_FROM]

    @pw.step_function("long.double")
    def double(data: int, ctx: pw.StepContext) -> int:
        if data >= threshold[0]:
            raise ConnectionError(f"item {data} failed")
        return data * 2

    each = {"function": "long.double", "for_each": {"$ref": "trigger"}, "mode": "sequential"}
    options = {"retries": 1, "retry_delay": "1h", "max_items": 1000}
    pw.graph_workflow("long.each", {"entry": "each", "nodes": {"each": {**each, **options}}})
    return threshold


def rows_read_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The step rows read from now on (their keys), as model instances."""
    read: list[str] = []
    from_db = WorkflowStep.from_db.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, *args: Any, **kwargs: Any) -> WorkflowStep:
        step = from_db(cls, *args, **kwargs)
        read.append(step.step_key)
        return step

    monkeypatch.setattr(WorkflowStep, "from_db", classmethod(counted))
    return read


def test_long_for_each__the_items_done_are_read_as_a_count(failing_from):
    run_id = pw.start_workflow("long.each", list(range(ITEMS)), inline=True)

    steps, settled = read_graph_steps(run_id, registry.get_workflow("long.each").graph)

    assert set(steps) == {f"each[{FAILING_FROM}]"}  # the one waiting for its retry
    assert settled["each"].count == FAILING_FROM
    assert settled["each"].results() == [index * 2 for index in range(FAILING_FROM)]


def test_long_for_each__a_pass_reads_only_the_rows_still_open(failing_from, monkeypatch):
    run_id = pw.start_workflow("long.each", list(range(ITEMS)), inline=True)
    WorkflowStep.objects.filter(run_id=run_id, step_key=f"each[{FAILING_FROM}]").update(
        status="succeeded", result=FAILING_FROM * 2
    )
    failing_from[0] = FAILING_FROM + 1  # the next item fails too, and parks the pass
    read = rows_read_by(monkeypatch)

    orchestrate(run_id)  # runs item 151, which fails and parks the pass again

    assert read == []  # every row was done: none read as a model, not the 151 items
    step = WorkflowStep.objects.get(run_id=run_id, step_key=f"each[{FAILING_FROM + 1}]")
    assert (step.status, step.attempt) == ("failed", 1)


def test_long_for_each__completes_with_every_result_in_order(failing_from):
    run_id = pw.start_workflow("long.each", list(range(ITEMS)), inline=True)
    failing_from[0] = ITEMS  # every item works now

    drain(run_id, advance="2h")

    run = load_run(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"each": [i * 2 for i in range(ITEMS)]},
    )


def test_long_for_each__a_parallel_for_each_is_read_row_by_row(failing_from):
    # Its items need not succeed in order: which ones are done is read from their rows.
    graph = registry.get_workflow("long.each").graph
    each = {**graph.source["nodes"]["each"], "mode": "parallel"}
    pw.graph_workflow("long.parallel", {"entry": "each", "nodes": {"each": each}})
    run_id = pw.start_workflow("long.parallel", list(range(ITEMS)), inline=True)

    steps, settled = read_graph_steps(run_id, registry.get_workflow("long.parallel").graph)

    assert settled == {}
    assert len(steps) == ITEMS
