"""Graph runs are pinned to the definition they started on: its JSON is stored in a
`WorkflowVersion` when the run starts, a changed definition changes new runs only, and a run
whose stored version is gone fails with VERSION_NOT_FOUND."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.graph import definition_hash
from pikku_workflows.models import WorkflowVersion
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus
from tests.graph_runs import Calls, register_graph_functions, step_keys
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

V1 = {
    "entry": "a",
    "nodes": {"a": {"function": "g.q_echo", "next": "b"}, "b": {"function": "g.echo"}},
}
V2 = {
    "entry": "a",
    "nodes": {
        "a": {"function": "g.q_echo", "next": "c"},
        "c": {"function": "g.echo", "input": {"v2": True}},
    },
}


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


def redeploy(name: str, definition: dict) -> None:
    """What a deploy with a changed definition does to this process's registry."""
    registry.workflows.pop(name)
    pw.graph_workflow(name, definition)


def test_graph_version__the_definition_is_stored_with_its_hash_when_a_run_starts(calls):
    graph = pw.graph_workflow("graph.versioned", V1)
    assert not WorkflowVersion.objects.exists()  # registering writes nothing

    run_id = pw.start_workflow("graph.versioned", {})

    version = WorkflowVersion.objects.get()
    assert (version.name, version.kind, version.graph_hash) == (
        "graph.versioned",
        "graph",
        graph.hash,
    )
    assert version.definition == V1
    assert version.graph_hash == definition_hash(V1)
    run = load_run(run_id)
    assert run.graph_hash == run.code_version == graph.hash


def test_graph_version__a_run_goes_on_from_its_stored_definition_after_it_changed(calls):
    pw.graph_workflow("graph.versioned", V1)
    old_run = pw.start_workflow("graph.versioned", {"run": "old"})
    orchestrate(old_run)  # parks on `a`, queued

    redeploy("graph.versioned", V2)
    new_run = pw.start_workflow("graph.versioned", {"run": "new"})
    drain_queue()

    assert step_keys(old_run) == ["a", "b"]
    assert load_run(old_run).output == {"b": {"run": "old"}}
    assert step_keys(new_run) == ["a", "c"]
    assert load_run(new_run).output == {"c": {"v2": True}}
    assert WorkflowVersion.objects.filter(name="graph.versioned").count() == 2
    assert load_run(old_run).graph_hash == definition_hash(V1)
    assert load_run(new_run).graph_hash == definition_hash(V2)


def test_graph_version__a_run_goes_on_where_its_workflow_is_no_longer_registered(calls):
    pw.graph_workflow("graph.versioned", V1)
    run_id = pw.start_workflow("graph.versioned", {})
    orchestrate(run_id)

    registry.workflows.pop("graph.versioned")
    drain_queue()

    assert load_run(run_id).status == RunStatus.COMPLETED


def test_graph_version__a_run_whose_stored_version_is_gone_fails_version_not_found(calls):
    pw.graph_workflow("graph.versioned", V1)
    run_id = pw.start_workflow("graph.versioned", {})
    orchestrate(run_id)
    redeploy("graph.versioned", V2)
    WorkflowVersion.objects.filter(graph_hash=definition_hash(V1)).delete()

    drain_queue()

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "VERSION_NOT_FOUND"
    assert definition_hash(V1) in run.error["message"]
    assert step_keys(run_id) == ["a"]
