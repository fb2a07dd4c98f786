"""Queued graph nodes follow the in-place rule (docs/architecture.md §4): a pass on a worker
runs a chain of queued nodes itself, and of a fan-out it hands every queued node but the last
to the queue (so they run in parallel on other workers) and runs the last one in place."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStepHistory
from pikku_workflows.status import RunStatus
from tests.graph_runs import Calls, register_graph_functions
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


def dispatches(run_id: str) -> dict[str, str | None]:
    rows = WorkflowStepHistory.objects.filter(step__run_id=run_id, attempt=1)
    return dict(rows.values_list("step__step_key", "dispatch"))


def started(name: str, input: dict) -> str:
    """A queued start whose start message the test runs itself, as a worker would."""
    from django_q.models import OrmQ

    run_id = pw.start_workflow(name, input)
    OrmQ.objects.all().delete()
    return run_id


def test_graph_in_place__a_worker_pass_runs_a_chain_of_queued_nodes_itself(calls):
    nodes = {f"n{i}": {"function": "g.q_echo", "next": f"n{i + 1}"} for i in range(4)}
    nodes["n4"] = {"function": "g.q_echo"}
    pw.graph_workflow("graph.chain", {"entry": "n0", "nodes": nodes})
    run_id = started("graph.chain", {"v": 1})

    tasks.orchestrate(run_id)

    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert set(dispatches(run_id).values()) == {"in_place"}
    assert queued_tasks() == []


def test_graph_in_place__a_fan_out_queues_all_but_the_last_node_and_runs_that_one(calls):
    pw.graph_workflow(
        "graph.fan_in_place",
        {
            "entry": "start",
            "nodes": {
                "start": {"function": "g.echo", "next": ["b", "c", "d"]},
                "b": {"function": "g.q_echo", "next": "join"},
                "c": {"function": "g.q_echo", "next": "join"},
                "d": {"function": "g.q_echo", "next": "join"},
                "join": {"function": "g.echo"},
            },
        },
    )
    run_id = started("graph.fan_in_place", {"v": 1})

    tasks.orchestrate(run_id)

    assert sorted(args[1] for task, args in queued_tasks() if task == EXECUTE_STEP) == ["b", "c"]
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert dispatches(run_id) == {
        "start": "inline",
        "b": "queued",
        "c": "queued",
        "d": "in_place",
        "join": "inline",
    }
    assert calls.keys.count("join") == 1
