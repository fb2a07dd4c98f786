"""Graph node options through the engine: retries and retry_delay on the step rows, failure only
after exhaustion (GRAPH_NODE_FAILED), on_error nodes, a workflow as a node (a child run),
`ctx.set_state`, and the check at start (unknown step functions) that writes nothing."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.graph_runs import Calls, graph_steps, register_graph_functions, step_keys
from tests.queue import drain_queue
from tests.rows import attempt_statuses, load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


# --- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "stored"),
    [
        ({"retries": 3, "retry_delay": 250}, (3, 4, "250")),
        ({"retries": 2, "retry_delay": "exponential"}, (2, 3, "exponential")),
        ({}, (5, 6, "exponential")),
        ({"retries": 0}, (0, 1, "exponential")),
    ],
)
def test_graph_node__retries_and_retry_delay_are_stored_on_its_step(calls, options, stored):
    pw.graph_workflow(
        "graph.options", {"entry": "a", "nodes": {"a": {"function": "g.q_echo", **options}}}
    )

    run_id = pw.start_workflow("graph.options", {})
    orchestrate(run_id)

    step = load_step(run_id, "a")
    assert (step.retries, step.attempt_limit, step.retry_delay) == stored


def test_graph_node__a_failed_attempt_with_retries_left_does_not_fail_the_run(calls):
    pw.graph_workflow(
        "graph.flaky",
        {
            "entry": "a",
            "nodes": {
                "a": {"function": "g.flaky", "retries": 2, "retry_delay": 0, "next": "b"},
                "b": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.flaky", {"fail_times": 2}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"b": {"attempt": 3}})
    assert attempt_statuses(run_id, "a") == [
        (1, StepStatus.FAILED),
        (2, StepStatus.FAILED),
        (3, StepStatus.SUCCEEDED),
    ]


def test_graph_node__queued_retries_wait_on_their_timer_and_the_run_waits_too(calls):
    pw.graph_workflow(
        "graph.queued_flaky",
        {
            "entry": "a",
            "nodes": {"a": {"function": "g.q_flaky", "retries": 1, "retry_delay": "1h"}},
        },
    )
    run_id = pw.start_workflow("graph.queued_flaky", {"fail_times": 1})

    drain_queue()

    step = load_step(run_id, "a")
    assert (step.status, step.attempt, step.wake_at is not None) == (StepStatus.FAILED, 1, True)
    assert load_run(run_id).status == RunStatus.RUNNING  # in flight, not the run's failure
    assert pw.get_run_status(run_id)["waiting_on"]["kind"] == "retry"


def test_graph_node__failed_after_exhausting_its_attempts_fails_the_run(calls):
    pw.graph_workflow(
        "graph.exhausted",
        {
            "entry": "a",
            "nodes": {
                "a": {"function": "g.fail", "retries": 1, "retry_delay": 0, "next": "b"},
                "b": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.exhausted", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "GRAPH_NODE_FAILED"
    assert run.error["step_key"] == "a"
    assert "down on attempt 2" in run.error["message"]
    assert calls.keys == ["a", "a"]
    assert step_keys(run_id) == ["a"]


# --- on_error -------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["g.fail", "g.q_fail"])
def test_graph_node__on_error_node_runs_once_with_the_error_then_the_run_fails(calls, failing):
    pw.graph_workflow(
        "graph.on_error",
        {
            "entry": "charge",
            "nodes": {
                "charge": {"function": failing, "retries": 0, "on_error": "refund", "next": "ship"},
                "refund": {"function": "g.echo"},
                "ship": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.on_error", {"amount": 5})
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.FAILED,
        "GRAPH_NODE_FAILED",
        "charge",
    )
    assert graph_steps(run_id) == [
        ("charge", StepStatus.FAILED, None),
        ("charge:onError", StepStatus.SUCCEEDED, "charge"),
    ]
    handler_input = calls.data_of("charge:onError")
    assert handler_input["data"] == {"amount": 5}
    assert "down on attempt 1" in handler_input["error"]["message"]
    assert "ship" not in calls.keys

    orchestrate(run_id)  # a late message: the handler never runs twice
    assert calls.keys.count("charge:onError") == 1


def test_graph_node__retry_run_after_a_node_failed_re_arms_it_and_the_graph_goes_on(calls):
    state = {"broken": True}

    @pw.step_function("g.until_fixed")
    def until_fixed(data, ctx):
        if state["broken"]:
            raise ConnectionError("still broken")
        return {"fixed": True}

    pw.graph_workflow(
        "graph.retry_run",
        {
            "entry": "a",
            "nodes": {
                "a": {"function": "g.until_fixed", "retries": 0, "on_error": "alert", "next": "b"},
                "alert": {"function": "g.echo"},
                "b": {"function": "g.echo"},
            },
        },
    )
    run_id = pw.start_workflow("graph.retry_run", {}, inline=True)
    assert load_run(run_id).status == RunStatus.FAILED

    state["broken"] = False
    pw.retry_run(run_id)
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"b": {"fixed": True}})
    assert calls.keys.count("a:onError") == 1
    assert attempt_statuses(run_id, "a") == [(1, StepStatus.FAILED), (2, StepStatus.SUCCEEDED)]


# --- functions and children -----------------------------------------------------------------


def test_graph_node__a_workflow_name_starts_a_child_run_and_its_output_flows_on(calls):
    @pw.workflow("graph.child_body")
    def child_body(wf, input):
        return {"doubled": input["n"] * 2}

    pw.graph_workflow(
        "graph.parent",
        {
            "entry": "child",
            "nodes": {
                "child": {"function": "graph.child_body", "next": "after"},
                "after": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.parent", {"n": 4})
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"after": {"doubled": 8}})
    child = WorkflowRun.objects.get(parent_run_id=run_id)
    assert load_step(run_id, "child").child_run_id == child.pk


def test_graph__a_graph_can_be_a_child_of_a_code_workflow(calls):
    pw.graph_workflow("graph.as_child", {"entry": "a", "nodes": {"a": {"function": "g.echo"}}})

    @pw.workflow("graph.code_parent")
    def code_parent(wf, input):
        return wf.do("sub", "graph.as_child", {"v": 3})

    run_id = pw.start_workflow("graph.code_parent", {}, inline=True)

    assert load_run(run_id).output == {"a": {"v": 3}}


def test_graph_node__a_step_function_gone_at_pass_time_suspends_until_deployed(calls):
    pw.graph_workflow(
        "graph.undeployed",
        {
            "entry": "a",
            "nodes": {"a": {"function": "g.echo", "next": "b"}, "b": {"function": "g.later"}},
        },
    )

    @pw.step_function("g.later")
    def later(data, ctx):
        return "deployed"

    from pikku_workflows.registry import registry

    run_id = pw.start_workflow("graph.undeployed", {})  # checked at start: g.later exists
    registry.step_functions.pop("g.later")  # a worker of an older release picks the run up
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
        "b",
    )
    assert load_step(run_id, "b").status == StepStatus.PENDING

    pw.step_function("g.later")(later)
    pw.resume_run(run_id)
    drain_queue()
    assert load_run(run_id).output == {"b": "deployed"}


# --- checked at start -----------------------------------------------------------------------


def test_graph__unknown_step_functions_at_start_list_every_problem_and_write_nothing(calls):
    pw.graph_workflow(
        "graph.unknown",
        {
            "entry": "a",
            "nodes": {"a": {"function": "g.nope", "next": "b"}, "b": {"function": "g.neither"}},
        },
    )

    with pytest.raises(pw.InvalidInput) as raised:
        pw.start_workflow("graph.unknown", {})

    assert raised.value.problems == [
        "node 'a': unknown step function 'g.nope'",
        "node 'b': unknown step function 'g.neither'",
    ]
    assert not WorkflowRun.objects.exists()


# --- node state -----------------------------------------------------------------------------


@pytest.mark.parametrize("queued", [False, True])
def test_graph_node__set_state_merges_keys_from_parallel_nodes(calls, queued):
    @pw.step_function("g.note", inline=not queued)
    def note(data, ctx):
        ctx.set_state(data["key"], data["value"])
        return data

    pw.graph_workflow(
        "graph.state",
        {
            "entry": ["a", "b", "c"],
            "nodes": {
                "a": {"function": "g.note", "input": {"key": "a", "value": [1, {"x": None}]}},
                "b": {"function": "g.note", "input": {"key": "b.c", "value": False}},
                "c": {"function": "g.note", "input": {"key": 'it\'s "quoted"', "value": 0}},
            },
        },
    )

    run_id = pw.start_workflow("graph.state", {})
    drain_queue()

    assert load_run(run_id).state == {"a": [1, {"x": None}], "b.c": False, 'it\'s "quoted"': 0}


def test_step_context__set_state_by_a_superseded_attempt_writes_nothing(calls):
    holder = {}

    @pw.step_function("g.keeps_context")
    def keeps_context(data, ctx):
        holder["ctx"] = ctx
        return {}

    pw.graph_workflow(
        "graph.stale_state", {"entry": "a", "nodes": {"a": {"function": "g.keeps_context"}}}
    )
    run_id = pw.start_workflow("graph.stale_state", {}, inline=True)

    # The attempt is over (its step succeeded): its context is no longer allowed to write.
    with pytest.raises(pw.StepSuperseded):
        holder["ctx"].set_state("late", 1)
    assert "late" not in load_run(run_id).state
    assert WorkflowStep.objects.get(run_id=run_id).status == StepStatus.SUCCEEDED
