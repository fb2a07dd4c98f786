"""Replay: recorded steps return their stored result without running again, and a pass reads
the run's steps with one query."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.replay.attempts import claim_next_attempt
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory, WorkflowVersion
from pikku_workflows.status import RunStatus, StepStatus
from tests.concurrency.harness import elsewhere

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STEP_TABLE = WorkflowStep._meta.db_table
HISTORY_TABLE = WorkflowStepHistory._meta.db_table
RUN_TABLE = WorkflowRun._meta.db_table


def _statements(context: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in context.captured_queries]


def _reads_of(table: str, statements: list[str]) -> list[str]:
    return [sql for sql in statements if sql.startswith("SELECT") and f'FROM "{table}"' in sql]


@pytest.fixture
def twenty_steps_then_a_long_sleep():
    """A workflow of 20 recorded steps whose last step (a long sleep) parks the run."""
    calls = []

    @pw.step_function("replay.add_one")
    def add_one(data, ctx):
        calls.append(ctx.step_key)
        return data["n"] + 1

    @pw.workflow("replay.twenty")
    def twenty(wf, input):
        n = 0
        for _ in range(20):
            n = wf.do("add", "replay.add_one", {"n": n})
        wf.sleep("rest", "1h")
        return n

    run_id = pw.start_workflow("replay.twenty", {}, inline=True)
    return run_id, calls


def test_replay__recorded_steps_are_not_run_again(twenty_steps_then_a_long_sleep):
    run_id, calls = twenty_steps_then_a_long_sleep
    assert len(calls) == 20

    orchestrate(run_id)
    orchestrate(run_id)

    assert len(calls) == 20
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.RUNNING
    steps = WorkflowStep.objects.filter(run_id=run_id)
    assert steps.filter(status=StepStatus.SUCCEEDED).count() == 20
    assert steps.get(step_key="rest").status == StepStatus.SCHEDULED


def test_replay__pass_reads_every_step_with_one_query(twenty_steps_then_a_long_sleep):
    run_id, calls = twenty_steps_then_a_long_sleep

    with CaptureQueriesContext(connection) as context:
        orchestrate(run_id)

    statements = _statements(context)
    # The 20 recorded steps and the parked sleep all come from one read of the step table.
    assert len(_reads_of(STEP_TABLE, statements)) == 1
    # 1. read the run (settled runs return here), 2. take the run lease (conditional UPDATE),
    # 3. read every step of the run, 4. release the run lease. Nothing is written per step.
    assert len(statements) == 4, statements
    assert statements[0].startswith("SELECT") and f'FROM "{RUN_TABLE}"' in statements[0]
    assert statements[1].startswith(f'UPDATE "{RUN_TABLE}"')
    assert statements[3].startswith(f'UPDATE "{RUN_TABLE}"')
    assert len(calls) == 20


def test_replay__settled_run_returns_after_one_read_and_takes_no_lease():
    calls = []

    @pw.workflow("replay.settled")
    def settled(wf, input):
        calls.append(1)
        return wf.do("only", lambda: "done")

    run_id = pw.start_workflow("replay.settled", {}, inline=True)

    with CaptureQueriesContext(connection) as context:
        orchestrate(run_id)

    statements = _statements(context)
    assert len(statements) == 1
    assert statements[0].startswith("SELECT")
    assert calls == [1]
    assert WorkflowRun.objects.get(pk=run_id).output == "done"


def _statements_to_run(name: str, steps: int) -> list[str]:
    with CaptureQueriesContext(connection) as context:
        run_id = pw.start_workflow(name, {"steps": steps}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    return _statements(context)


def test_replay__each_new_inline_step_costs_one_statement():
    @pw.step_function("replay.noop")
    def noop(data, ctx):
        return data

    @pw.workflow("replay.k_steps")
    def k_steps(wf, input):
        for i in range(input["steps"]):
            wf.do("step", "replay.noop", i)
        return input["steps"]

    short = _statements_to_run("replay.k_steps", 5)
    long = _statements_to_run("replay.k_steps", 15)

    def per_step(prefix: str | None = None) -> float:
        def count(statements: list[str]) -> int:
            return sum(1 for sql in statements if prefix is None or sql.lstrip().startswith(prefix))

        return (count(long) - count(short)) / 10

    # Each new inline step is one statement, its own (autocommit) transaction, so one commit
    # and no BEGIN/COMMIT round trips (Django would capture those): WITH moved (the previous
    # step's result, fenced by attempt and status, with its history row), guard (the run is
    # running under our lease, FOR SHARE), INSERT the step straight into running with its
    # history row (attempt 1): nothing if the guard fails. The step function runs after it,
    # outside any transaction; its result waits for the next step's statement (or the pass's
    # end).
    assert per_step() == 1
    assert per_step("WITH moved") == 1
    assert per_step("BEGIN") == per_step("COMMIT") == 0
    # No per-step re-read of the run or of the steps; a run started inline is born leased and
    # has no steps yet, so its first pass reads none at all.
    assert per_step("SELECT") == 0
    assert _reads_of(STEP_TABLE, long) == []
    created = [sql for sql in long if sql.lstrip().startswith("WITH guard")]
    assert all(f'INSERT INTO "{STEP_TABLE}"' in sql for sql in created)
    assert all(f'INSERT INTO "{HISTORY_TABLE}"' in sql for sql in created)
    recorded = [sql for sql in long if sql.lstrip().startswith("WITH moved")]
    assert all(f'UPDATE "{STEP_TABLE}"' in sql for sql in recorded)
    assert all(f'UPDATE "{HISTORY_TABLE}"' in sql for sql in recorded)


def test_replay__resumed_run_returns_recorded_results_and_runs_only_new_steps():
    calls = []
    seen = []

    @pw.step_function("replay.tick")
    def tick(data, ctx):
        calls.append(ctx.step_key)
        return len(calls)

    @pw.workflow("replay.gated")
    def gated(wf, input):
        before = [wf.do("before", "replay.tick") for _ in range(3)]
        seen.append(before)
        wf.suspend("gate")
        after = [wf.do("after", "replay.tick") for _ in range(2)]
        return {"before": before, "after": after}

    run_id = pw.start_workflow("replay.gated", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.SUSPENDED

    pw.resume_run(run_id)
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert calls == ["before", "before#1", "before#2", "after", "after#1"]
    # The replay saw the recorded results, not fresh calls.
    assert seen == [[1, 2, 3], [1, 2, 3]]
    assert run.output == {"before": [1, 2, 3], "after": [4, 5]}


def test_replay__an_inline_start_reads_nothing_it_has_just_written():
    @pw.step_function("replay.once")
    def once(data, ctx):
        return data

    @pw.workflow("replay.one_step")
    def one_step(wf, input):
        return wf.do("only", "replay.once", input)

    statements = _statements_to_run("replay.one_step", 1)

    # The run is inserted already leased to the starting call (with its version row, in one
    # statement), and the write that completes it records the step's result and releases the
    # lease: no read of the run, no lease round trips, no parent to notify.
    prefixes = [
        "WITH version",  # upsert the version row, insert the run
        "WITH guard",  # the step, straight into running
        "WITH moved",  # its result, and the run completed
    ]
    assert len(statements) == len(prefixes), "\n".join(statements)
    for statement, prefix in zip(statements, prefixes, strict=True):
        assert statement.lstrip().startswith(prefix), statement
    assert 'UPDATE "pikku_workflows_workflowrun" SET "status" = \'completed\'' in statements[2]
    assert 'INSERT INTO "pikku_workflows_workflowrun"' in statements[0]
    assert WorkflowVersion.objects.filter(name="replay.one_step").count() == 1
    run = WorkflowRun.objects.get()
    assert (run.status, run.output, run.lease_holder, run.lease_expires_at) == (
        RunStatus.COMPLETED,
        {"steps": 1},
        None,
        None,
    )


def test_replay__the_completing_write_records_a_last_step_only_under_its_attempt():
    # The run's last step returns in the pass; meanwhile its lease lapsed and another process
    # claimed its next attempt. The write that completes the run carries the step's result, so
    # it records neither: the other process's attempt counts and the run goes on running.
    @pw.step_function("replay.last")
    def last(data, ctx):
        if ctx.attempt == 1:
            assert elsewhere(lambda: claim_next_attempt(ctx.run_id, ctx.step_key).claimed)
        return ctx.attempt

    @pw.workflow("replay.ends_on_it")
    def ends_on_it(wf, input):
        return wf.do("last", "replay.last", {}, retries=2)

    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        run_id = pw.start_workflow("replay.ends_on_it", {}, inline=True)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="last")
    assert (step.status, step.attempt, step.result) == (StepStatus.RUNNING, 2, None)
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.RUNNING, None)
