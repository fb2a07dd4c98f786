"""Graph runs under the same operations and recovery as code runs: a queue that refuses a
node's message leaves it pending for the next pass or recovery to dispatch, lost messages are
relayed, cancel and suspend stop a graph from starting more, and the summary and timeline read
the same."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.exceptions import WorkflowDispatchException
from pikku_workflows.models import WorkflowStep, WorkflowVersion
from pikku_workflows.status import RunStatus, StepStatus
from tests.faults import QUEUE_TABLE, HeldRowLock, refused
from tests.graph_runs import Calls, register_graph_functions, step_keys
from tests.queue import drain_queue, queued_tasks
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FAN_OUT = {
    "entry": "start",
    "nodes": {
        "start": {"function": "g.echo", "next": ["b", "c"]},
        "b": {"function": "g.q_echo", "next": "join"},
        "c": {"function": "g.q_echo", "next": "join"},
        "join": {"function": "g.echo"},
    },
}


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    pw.graph_workflow("graph.ops", FAN_OUT)
    return seen


def statuses(run_id: str) -> dict[str, str]:
    return dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))


def test_graph__a_refused_message_leaves_the_node_pending_and_the_next_pass_dispatches_it(calls):
    run_id = pw.start_workflow("graph.ops", {})
    with refused(QUEUE_TABLE), pytest.raises(WorkflowDispatchException):
        orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error) == (RunStatus.RUNNING, None)
    assert statuses(run_id) == {"start": StepStatus.SUCCEEDED, "b": StepStatus.PENDING}

    orchestrate(run_id)  # the queue is back: the pass dispatches b (in flight) and fires c

    assert statuses(run_id) == {
        "start": StepStatus.SUCCEEDED,
        "b": StepStatus.SCHEDULED,
        "c": StepStatus.SCHEDULED,
    }
    drain_queue()
    assert load_run(run_id).status == RunStatus.COMPLETED
    assert calls.keys.count("start") == 1  # never re-run by the second pass


def test_graph__lost_node_messages_are_relayed_by_recovery(calls, fresh_backoff):
    run_id = pw.start_workflow("graph.ops", {})
    orchestrate(run_id)
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()  # the broker lost every message

    relay_now = {"RELAY_PENDING_AFTER_SECONDS": 0, "REDISPATCH_BACKOFF_SECONDS": 0}
    with override_settings(PIKKU_WORKFLOWS=relay_now):
        counts = pw.recover()

    assert counts["relayed"] == 2
    drain_queue()
    assert load_run(run_id).status == RunStatus.COMPLETED


def test_graph__cancel_mid_graph_starts_nothing_more(calls):
    run_id = pw.start_workflow("graph.ops", {})
    orchestrate(run_id)

    pw.cancel_run(run_id, reason="customer left")
    drain_queue()

    assert load_run(run_id).status == RunStatus.CANCELLED
    assert "join" not in step_keys(run_id)
    assert "join" not in calls.keys


def test_graph__suspend_then_resume_goes_on_where_it_stopped(calls):
    run_id = pw.start_workflow("graph.ops", {})
    orchestrate(run_id)
    pw.suspend_run(run_id, reason="hold")
    drain_queue()
    assert load_run(run_id).status == RunStatus.SUSPENDED
    assert "join" not in step_keys(run_id)

    pw.resume_run(run_id)
    drain_queue()

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert calls.keys.count("join") == 1


def test_graph__summary_and_timeline_read_like_a_code_run(calls):
    run_id = pw.start_workflow("graph.ops", {}, inline=True)

    summary = pw.get_run_status(run_id)
    assert summary["status"] == RunStatus.COMPLETED
    assert sorted(step["key"] for step in summary["steps"]) == ["b", "c", "join", "start"]
    timeline = pw.get_run_timeline(run_id)
    join_events = [event for event in timeline if event["step_key"] == "join"]
    assert [event["event"] for event in join_events][-1] == "succeeded"
    assert join_events[0]["from_step_key"] == "b"
    assert queued_tasks() == []


def test_graph__fork_of_a_failed_graph_run_reuses_what_succeeded_before_the_step(calls):
    state = {"broken": True}

    @pw.step_function("g.until_fixed")
    def until_fixed(data, ctx):
        if state["broken"]:
            raise ConnectionError("still broken")
        return {"fixed": True}

    pw.graph_workflow(
        "graph.fork",
        {
            "entry": "a",
            "nodes": {
                "a": {"function": "g.echo", "next": "b"},
                "b": {"function": "g.until_fixed", "retries": 0, "next": "c"},
                "c": {"function": "g.echo"},
            },
        },
    )
    source = pw.start_workflow("graph.fork", {"v": 1}, inline=True)
    assert load_run(source).error["code"] == "GRAPH_NODE_FAILED"

    state["broken"] = False
    fork = pw.fork_run(source, from_step="b")
    drain_queue()

    run = load_run(fork)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"c": {"fixed": True}})
    assert calls.keys.count("a") == 1  # copied into the fork, not run again
    copied = WorkflowStep.objects.get(run_id=fork, step_key="a")
    assert (copied.copied, copied.result) == (True, {"v": 1})


def test_graph__a_database_error_reading_the_stored_version_abandons_the_pass(calls):
    from pikku_workflows.registry import registry

    run_id = pw.start_workflow("graph.ops", {})
    registry.workflows.pop("graph.ops")  # the pass must read the stored version
    version_table = WorkflowVersion._meta.db_table

    # Another transaction holds the versions table; our read times out (a statement timeout).
    with HeldRowLock(f"LOCK TABLE {version_table} IN ACCESS EXCLUSIVE MODE", []):
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '300ms'")
        try:
            with pytest.raises(DatabaseError):
                orchestrate(run_id)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")

    run = load_run(run_id)
    assert (run.status, run.error, run.lease_holder) == (RunStatus.RUNNING, None, None)
    orchestrate(run_id)  # the database is back: the run goes on from its stored version
    drain_queue()
    assert load_run(run_id).status == RunStatus.COMPLETED
