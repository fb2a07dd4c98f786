"""Each validation error of a graph definition, through the engine: the definition is refused
before any run exists (at registration; step function names at start), with every problem
listed, and nothing is written (no run, no version)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowVersion
from tests.graph_runs import Calls, register_graph_functions

pytestmark = pytest.mark.django_db

E = {"function": "g.echo"}

INVALID = {
    "unknown node in next": (
        {"entry": "a", "nodes": {"a": {**E, "next": "nope"}}},
        "unknown node 'nope'",
    ),
    "unknown node in a $ref": (
        {"entry": "a", "nodes": {"a": {**E, "input": {"x": {"$ref": "nope"}}}}},
        "'nope'",
    ),
    "unknown node in for_each": (
        {"entry": "a", "nodes": {"a": {**E, "for_each": {"$ref": "nope"}}}},
        "'nope'",
    ),
    "unknown node in on_error": (
        {"entry": "a", "nodes": {"a": {**E, "on_error": "nope"}}},
        "'nope'",
    ),
    "mode without for_each": (
        {"entry": "a", "nodes": {"a": {**E, "mode": "sequential"}}},
        "mode",
    ),
    "no entry": ({"nodes": {"a": E}}, "no entry"),
    "unreachable node": (
        {"entry": "a", "nodes": {"a": E, "island": E}},
        "node 'island' is unreachable",
    ),
    "a join that can never run": (
        {
            "entry": "route",
            "nodes": {
                "route": {**E, "next": {"vip": "v", "std": "s"}},
                "v": {**E, "next": "done"},
                "s": {**E, "next": "done"},
                "done": E,
            },
        },
        "node 'done' can never run",
    ),
}


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


@pytest.mark.parametrize("case", sorted(INVALID))
def test_graph_validation__refused_before_any_run_exists(calls, case):
    definition, expected = INVALID[case]

    with pytest.raises(pw.InvalidInput) as raised:
        pw.graph_workflow(f"graph.invalid.{len(case)}", definition)

    assert any(expected in problem for problem in raised.value.problems), raised.value.problems
    with pytest.raises(pw.WorkflowNotFound):
        pw.start_workflow(f"graph.invalid.{len(case)}", {})
    assert not WorkflowRun.objects.exists()
    assert not WorkflowVersion.objects.exists()


def test_graph_validation__every_problem_is_listed_at_once(calls):
    definition = {
        "nodes": {
            "a": {**E, "next": "nope", "mode": "parallel"},
            "island": {**E, "on_error": "missing"},
        }
    }

    with pytest.raises(pw.InvalidInput) as raised:
        pw.graph_workflow("graph.invalid.many", definition)

    assert len(raised.value.problems) >= 4
    text = str(raised.value)
    for expected in ("no entry", "'nope'", "mode", "'missing'"):
        assert expected in text


def test_graph_validation__unknown_step_functions_are_refused_at_start(calls):
    pw.graph_workflow("graph.later", {"entry": "a", "nodes": {"a": {"function": "g.not_yet"}}})

    with pytest.raises(pw.InvalidInput) as raised:
        pw.start_workflow("graph.later", {})
    assert raised.value.problems == ["node 'a': unknown step function 'g.not_yet'"]
    assert not WorkflowRun.objects.exists()

    @pw.step_function("g.not_yet")
    def not_yet(data, ctx):
        return "here now"

    run_id = pw.start_workflow("graph.later", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).output == {"a": "here now"}
