"""A run is failed only by user code. When one of the engine's own statements fails (the queue
table refuses the message, a lock or statement timeout, a deadlock, a revoked permission) the
pass is abandoned: the run stays running, nothing is marked failed, and once the database
accepts the statement again recovery finishes the run (docs/architecture.md §3).

The task whose pass is abandoned ends quietly (its message is acknowledged, recovery relays the
run) and reports to the outage log: one WARNING for the whole outage, no traceback.

The outage tests send their steps through the queue (`through_the_queue`): a step a worker's
pass runs in place sends no message to refuse."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.faults import QUEUE_TABLE, refused
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = 20
STEP_TABLE = WorkflowStep._meta.db_table


@pytest.fixture
def calls() -> list[tuple[str, int]]:
    made: list[tuple[str, int]] = []

    @pw.step_function("outage.charge", inline=False)
    def charge(data: dict, ctx: pw.StepContext) -> dict:
        made.append((ctx.run_id, ctx.attempt))
        return {"charged": data["n"]}

    @pw.step_function("outage.reserve")
    def reserve(data: dict, ctx: pw.StepContext) -> str:
        made.append((ctx.run_id, ctx.attempt))
        return "reserved"

    @pw.workflow("outage.order")
    def order(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("charge", "outage.charge", input, retries=0)

    @pw.workflow("outage.reservation")
    def reservation(wf: pw.Workflow, input: dict) -> str:
        return wf.do("reserve", "outage.reserve", input, retries=0)

    return made


def recover(**settings: float) -> dict[str, int]:
    with override_settings(PIKKU_WORKFLOWS=settings):
        return pw.recover()


def assert_untouched(run_id: str) -> None:
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error, run.output) == (RunStatus.RUNNING, None, None)
    assert not WorkflowStepHistory.objects.filter(
        step__run_id=run_id, status=StepStatus.FAILED
    ).exists()


def test_queue_outage__in_flight_runs_stay_running_with_their_step_pending(
    calls, fresh_backoff, through_the_queue, outage_log
):
    run_ids = [pw.start_workflow("outage.order", {"n": n}) for n in range(IN_FLIGHT)]

    with refused(QUEUE_TABLE):  # the queue table refuses every message, as in an outage
        for run_id in run_ids:
            tasks.orchestrate(run_id)  # ends quietly: the pass is abandoned, nothing failed

    for run_id in run_ids:
        assert_untouched(run_id)
        step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
        assert (step.status, step.attempt) == (StepStatus.PENDING, 1)
    assert calls == []
    (began,) = outage_log.lines()
    assert began.getMessage().startswith(f"pikku_workflows: outage: the pass of run {run_ids[0]}")
    assert "WorkflowDispatchException" in began.getMessage()
    assert "injected fault" in began.getMessage() and began.exc_info is None


def test_queue_outage__once_the_queue_is_back_recovery_finishes_every_run(
    calls, fresh_backoff, through_the_queue
):
    run_ids = [pw.start_workflow("outage.order", {"n": n}) for n in range(IN_FLIGHT)]
    with refused(QUEUE_TABLE):
        for run_id in run_ids:
            tasks.orchestrate(run_id)

    assert recover(RELAY_PENDING_AFTER_SECONDS=0)["relayed"] == IN_FLIGHT
    drain_queue()

    runs = WorkflowRun.objects.filter(pk__in=run_ids)
    assert sorted(run.status for run in runs) == [RunStatus.COMPLETED] * IN_FLIGHT
    assert sorted(calls) == sorted((run_id, 1) for run_id in run_ids)  # each step ran once


@pytest.mark.parametrize(
    "errcode",
    [
        "55P03",  # lock_not_available: a lock_timeout expired
        "57014",  # query_canceled: a statement_timeout expired
        "40P01",  # deadlock_detected
        "40001",  # serialization_failure
        "42501",  # insufficient_privilege: a revoked permission
    ],
)
def test_engine_statement_error__abandons_the_pass_and_fails_nothing(
    calls, errcode, fresh_backoff, outage_log
):
    run_id = pw.start_workflow("outage.reservation", {})

    with refused(STEP_TABLE, errcode=errcode):
        tasks.orchestrate(run_id)  # ends quietly; the outage log has it, recovery relays the run

    assert_untouched(run_id)
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()
    assert calls == []
    (began,) = outage_log.lines()
    assert "injected fault" in began.getMessage()
    assert recover(STALLED_RUN_AFTER_SECONDS=0)["stalled"] == 1
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).output == "reserved"


def test_engine_statement_error__an_inline_start_returns_and_recovery_finishes(
    calls, fresh_backoff
):
    with refused(STEP_TABLE, errcode="57014"):
        run_id = pw.start_workflow("outage.reservation", {}, inline=True)  # never raises for it

    assert_untouched(run_id)
    assert recover(STALLED_RUN_AFTER_SECONDS=0)["stalled"] == 1
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).output == "reserved"


def test_engine_statement_error__a_user_database_error_still_fails_the_run(calls):
    @pw.workflow("outage.user_query")
    def user_query(wf: pw.Workflow, input: dict) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")  # the body's own bug

    run_id = pw.start_workflow("outage.user_query", {}, inline=True)

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert "no_such_table" in run.error["message"]
