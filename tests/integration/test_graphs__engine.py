"""Graph runs through the engine, one planner behaviour each: linear chains, branches stored in
`branch_taken`, fan-out dispatched in one pass and joins firing once, back edges `node#N` bounded
by `max_visits`, `for_each` instances (parallel, sequential, empty, not a list), references
and templates, and completion. In-process nodes run in the pass; queued ones on a worker
(`drain_queue` runs what a worker cluster would)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.graph_runs import Calls, graph_steps, lineage, register_graph_functions, step_keys
from tests.queue import drain_queue, queued_tasks
from tests.rows import load_run, load_step

# On both databases: the graph pass goes through the named statements on PostgreSQL and the
# ORM forms elsewhere.
pytestmark = [pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


def dispatched_steps() -> list[str]:
    """Step keys of the execute_step messages waiting in the queue."""
    return sorted(args[1] for task, args in queued_tasks() if task == EXECUTE_STEP)


# --- linear ---------------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["g.echo", "g.q_echo"])
def test_graph__linear_chain_passes_each_result_on_and_completes(calls, function):
    pw.graph_workflow(
        "graph.linear",
        {
            "entry": "a",
            "nodes": {
                "a": {"function": function, "next": "b"},
                "b": {"function": function, "next": "c"},
                "c": {"function": function},
            },
        },
    )

    run_id = pw.start_workflow("graph.linear", {"order": 7})
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, {"c": {"order": 7}}, None)
    assert graph_steps(run_id) == [
        ("a", StepStatus.SUCCEEDED, None),
        ("b", StepStatus.SUCCEEDED, "a"),
        ("c", StepStatus.SUCCEEDED, "b"),
    ]
    assert calls.keys == ["a", "b", "c"]
    assert run.graph_hash == run.code_version != ""


def test_graph__started_inline_runs_every_node_in_the_caller_queued_ones_too(calls):
    pw.graph_workflow(
        "graph.inline",
        {
            "entry": "a",
            "nodes": {"a": {"function": "g.q_echo", "next": "b"}, "b": {"function": "g.q_echo"}},
        },
    )

    run_id = pw.start_workflow("graph.inline", {"x": 1}, inline=True)

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert queued_tasks() == []
    assert calls.keys == ["a", "b"]


# --- branches -------------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["g.pick", "g.q_pick"])
def test_graph__ctx_branch_picks_the_path_and_is_stored_in_branch_taken(calls, function):
    pw.graph_workflow(
        "graph.branch",
        {
            "entry": "route",
            "nodes": {
                "route": {"function": function, "next": {"vip": "welcome_vip", "std": "welcome"}},
                "welcome_vip": {"function": "g.echo"},
                "welcome": {"function": "g.echo"},
            },
        },
    )

    vip = pw.start_workflow("graph.branch", {"branch": "vip"})
    std = pw.start_workflow("graph.branch", {"branch": "std"})
    drain_queue()

    assert step_keys(vip) == ["route", "welcome_vip"]
    assert step_keys(std) == ["route", "welcome"]
    assert load_step(vip, "route").branch_taken == "vip"
    assert load_step(std, "route").branch_taken == "std"
    assert load_run(vip).output == {"welcome_vip": {"branch": "vip"}}


def test_graph__a_branching_node_that_chooses_no_branch_ends_its_path(calls):
    pw.graph_workflow(
        "graph.no_branch",
        {
            "entry": "route",
            "nodes": {
                "route": {"function": "g.echo", "next": {"a": "x"}},
                "x": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.no_branch", {"v": 1}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"route": {"v": 1}})
    assert step_keys(run_id) == ["route"]
    assert load_step(run_id, "route").branch_taken is None


def test_graph__a_branch_next_does_not_name_fails_the_run_clearly(calls):
    pw.graph_workflow(
        "graph.bad_branch",
        {
            "entry": "route",
            "nodes": {
                "route": {"function": "g.pick", "next": {"a": "x"}},
                "x": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.bad_branch", {"branch": "zzz"}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert run.error["step_key"] == "route"
    assert "'zzz'" in run.error["message"]


def test_graph__a_branch_chosen_by_a_failed_attempt_is_dropped_with_it(calls):
    @pw.step_function("g.pick_then_fail_once")
    def pick_then_fail_once(data, ctx):
        if ctx.attempt == 1:
            ctx.branch("a")
            raise ConnectionError("after choosing a")
        return {"chose": "nothing"}

    pw.graph_workflow(
        "graph.branch_retry",
        {
            "entry": "route",
            "nodes": {
                "route": {
                    "function": "g.pick_then_fail_once",
                    "retry_delay": 0,
                    "next": {"a": "x"},
                },
                "x": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.branch_retry", {}, inline=True)

    assert step_keys(run_id) == ["route"]
    assert load_step(run_id, "route").branch_taken is None
    assert load_run(run_id).output == {"route": {"chose": "nothing"}}


# --- fan-out and joins ----------------------------------------------------------------------


def test_graph__queued_fan_out_is_dispatched_in_one_pass_and_the_join_fires_once(calls):
    pw.graph_workflow(
        "graph.fan_out",
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
    run_id = pw.start_workflow("graph.fan_out", {"n": 1})

    orchestrate(run_id)  # one pass

    assert dispatched_steps() == ["b", "c", "d"]
    statuses = dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    assert statuses == {
        "start": StepStatus.SUCCEEDED,
        "b": StepStatus.SCHEDULED,
        "c": StepStatus.SCHEDULED,
        "d": StepStatus.SCHEDULED,
    }

    drain_queue()

    run = load_run(run_id)
    assert run.status == RunStatus.COMPLETED
    assert calls.keys.count("join") == 1
    # Without an input, a join receives {predecessor: its result}.
    assert calls.data_of("join") == {"b": {"n": 1}, "c": {"n": 1}, "d": {"n": 1}}
    assert load_step(run_id, "join").from_step_key == "b"


def test_graph__a_join_waits_while_a_predecessor_is_still_running(calls):
    pw.graph_workflow(
        "graph.join_waits",
        {
            "entry": ["a", "b"],
            "nodes": {
                "a": {"function": "g.echo", "next": "c"},
                "b": {"function": "g.q_echo", "next": "c"},
                "c": {"function": "g.echo"},
            },
        },
    )
    run_id = pw.start_workflow("graph.join_waits", {"v": 1})

    orchestrate(run_id)
    orchestrate(run_id)  # a redelivered message: still waits on b, starts nothing twice

    # The queued entry is dispatched first, so its worker starts while the pass runs `a`.
    assert step_keys(run_id) == ["b", "a"]
    assert load_run(run_id).status == RunStatus.RUNNING
    drain_queue()
    assert load_run(run_id).status == RunStatus.COMPLETED
    assert calls.keys.count("c") == 1
    assert calls.keys.count("a") == 1


def test_graph__in_process_fan_out_runs_every_branch_in_the_pass(calls):
    pw.graph_workflow(
        "graph.local_fan_out",
        {
            "entry": "start",
            "nodes": {
                "start": {"function": "g.echo", "next": ["b", "c"]},
                "b": {"function": "g.echo", "next": "join"},
                "c": {"function": "g.echo", "next": "join"},
                "join": {"function": "g.echo", "input": {"from_b": {"$ref": "b"}}},
            },
        },
    )

    run_id = pw.start_workflow("graph.local_fan_out", {"v": 2})
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"join": {"from_b": {"v": 2}}})
    assert sorted(calls.keys) == ["b", "c", "join", "start"]


# --- back edges -----------------------------------------------------------------------------


def test_graph__a_back_edge_fires_node_visits_with_their_lineage(calls):
    # start -> a -> {again: b, done: c}; b -> a (the back edge).
    pw.graph_workflow(
        "graph.cycle",
        {
            "entry": "start",
            "nodes": {
                "start": {"function": "g.q_echo", "next": "a"},
                "a": {"function": "g.q_increment", "next": {"again": "b", "done": "c"}},
                "b": {"function": "g.q_echo", "next": "a"},
                "c": {"function": "g.q_echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.cycle", {"n": 0, "until": 2})
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"c": {"n": 2, "until": 2}})
    assert calls.keys == ["start", "a", "b", "a#1", "c"]
    assert lineage(run_id, "c") == ["start", "a", "b", "a#1", "c"]
    assert load_step(run_id, "a").branch_taken == "again"
    assert load_step(run_id, "a#1").branch_taken == "done"


def test_graph__a_back_edge_past_max_visits_fails_the_run(calls):
    pw.graph_workflow(
        "graph.bounded",
        {
            "entry": "a",
            "nodes": {
                "a": {
                    "function": "g.increment",
                    "max_visits": 3,
                    "next": {"again": "b", "done": "c"},
                },
                "b": {"function": "g.echo", "next": "a"},
                "c": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.bounded", {"n": 0, "until": 100}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "GRAPH_MAX_VISITS"
    assert run.error["step_key"] == "b#2"
    assert "max_visits (3)" in run.error["message"]
    assert [k for k in calls.keys if k.startswith("a")] == ["a", "a#1", "a#2"]


# --- for_each -------------------------------------------------------------------------------


def test_graph__parallel_for_each_dispatches_every_item_in_one_pass_with_ordered_results(calls):
    pw.graph_workflow(
        "graph.each",
        {
            "entry": "list",
            "nodes": {
                "list": {"function": "g.echo", "next": "handle"},
                "handle": {
                    "function": "g.q_echo",
                    "for_each": {"$ref": "list", "path": "items"},
                    "input": {
                        "item": {"$ref": "$item"},
                        "order": {"$ref": "trigger", "path": "id"},
                    },
                    "next": "total",
                },
                "total": {"function": "g.echo"},
            },
        },
    )
    items = ["a", "b", "c"]
    run_id = pw.start_workflow("graph.each", {"id": 9, "items": items})

    orchestrate(run_id)
    assert dispatched_steps() == ["handle[0]", "handle[1]", "handle[2]"]
    drain_queue()

    run = load_run(run_id)
    assert run.status == RunStatus.COMPLETED
    expected = [{"item": item, "order": 9} for item in items]
    assert run.output == {"total": expected}
    assert calls.keys.count("total") == 1
    assert step_keys(run_id) == ["list", "handle[0]", "handle[1]", "handle[2]", "total"]


def test_graph__sequential_for_each_never_has_two_items_in_flight(calls):
    pw.graph_workflow(
        "graph.each_sequential",
        {
            "entry": "handle",
            "nodes": {
                "handle": {
                    "function": "g.q_echo",
                    "for_each": {"$ref": "trigger", "path": "items"},
                    "mode": "sequential",
                },
            },
        },
    )
    run_id = pw.start_workflow("graph.each_sequential", {"items": [1, 2, 3]})

    in_flight_seen = []
    while True:
        orchestrate(run_id)
        unfinished = WorkflowStep.objects.filter(run_id=run_id).exclude(status=StepStatus.SUCCEEDED)
        in_flight_seen.append(unfinished.count())
        if not dispatched_steps():
            break
        drain_queue()

    assert max(in_flight_seen) == 1
    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"handle": [1, 2, 3]})
    assert calls.keys == ["handle[0]", "handle[1]", "handle[2]"]


def test_graph__for_each_over_an_empty_list_completes_at_once(calls):
    pw.graph_workflow(
        "graph.each_empty",
        {
            "entry": "handle",
            "nodes": {
                "handle": {
                    "function": "g.q_echo",
                    "for_each": {"$ref": "trigger", "path": "items"},
                    "next": "after",
                },
                "after": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.each_empty", {"items": []}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"after": []})
    assert step_keys(run_id) == ["after"]


def test_graph__for_each_over_something_that_is_no_list_fails_the_run_clearly(calls):
    pw.graph_workflow(
        "graph.each_bad",
        {
            "entry": "handle",
            "nodes": {
                "handle": {"function": "g.echo", "for_each": {"$ref": "trigger", "path": "items"}}
            },
        },
    )

    run_id = pw.start_workflow("graph.each_bad", {"items": {"not": "a list"}}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert "for_each needs a list" in run.error["message"]
    assert "dict" in run.error["message"]
    assert calls.keys == []


@pytest.mark.postgres
def test_graph__a_for_each_list_longer_than_max_fan_out_fails_the_run_and_runs_no_item(
    calls, settings
):
    settings.PIKKU_WORKFLOWS = {"MAX_FAN_OUT": 3}
    each = {"function": "g.echo", "for_each": {"$ref": "trigger"}}
    pw.graph_workflow("graph.each_capped", {"entry": "handle", "nodes": {"handle": each}})
    pw.graph_workflow(
        "graph.each_raised",
        {"entry": "handle", "nodes": {"handle": {**each, "max_items": 4}}},
    )

    capped = load_run(pw.start_workflow("graph.each_capped", [1, 2, 3, 4], inline=True))
    raised = load_run(pw.start_workflow("graph.each_raised", [1, 2, 3, 4], inline=True))
    at_the_cap = load_run(pw.start_workflow("graph.each_capped", [1, 2, 3], inline=True))

    assert (capped.status, capped.error["code"]) == (RunStatus.FAILED, "INVALID_INPUT")
    assert "for_each over 4 items" in capped.error["message"]
    assert "MAX_FAN_OUT setting allows at most 3" in capped.error["message"]
    assert step_keys(capped.pk) == []
    assert (raised.status, raised.output) == (RunStatus.COMPLETED, {"handle": [1, 2, 3, 4]})
    assert (at_the_cap.status, at_the_cap.output) == (RunStatus.COMPLETED, {"handle": [1, 2, 3]})


def test_graph__a_failing_item_fails_the_run_and_nothing_downstream_runs(calls):
    pw.graph_workflow(
        "graph.each_fails",
        {
            "entry": "handle",
            "nodes": {
                "handle": {
                    "function": "g.fail",
                    "retries": 0,
                    "for_each": {"$ref": "trigger"},
                    "next": "after",
                },
                "after": {"function": "g.echo"},
            },
        },
    )

    run_id = pw.start_workflow("graph.each_fails", [1, 2], inline=True)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.FAILED,
        "GRAPH_NODE_FAILED",
        "handle[0]",
    )
    assert "after" not in calls.keys


# --- inputs ---------------------------------------------------------------------------------


def test_graph__refs_with_paths_and_templates_resolve_against_results_and_trigger(calls):
    pw.graph_workflow(
        "graph.inputs",
        {
            "entry": "validate",
            "nodes": {
                "validate": {
                    "function": "g.echo",
                    "input": {"user": {"name": {"$ref": "trigger", "path": "name"}}},
                    "next": "mail",
                },
                "mail": {
                    "function": "g.echo",
                    "input": {
                        "to": {"$ref": "validate", "path": "user.name"},
                        "subject": {
                            "$template": "Order {{ trigger.id }} for {{ validate.user.name }}{{ trigger.missing }}"
                        },
                        "first_tag": {"$ref": "trigger", "path": "tags.0"},
                    },
                },
            },
        },
    )

    run_id = pw.start_workflow(
        "graph.inputs", {"id": 42, "name": "Ada", "tags": ["vip"]}, inline=True
    )

    assert load_run(run_id).output == {
        "mail": {"to": "Ada", "subject": "Order 42 for Ada", "first_tag": "vip"}
    }
