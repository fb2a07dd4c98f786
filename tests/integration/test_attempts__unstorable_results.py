"""A step result the database refuses (a lone surrogate passes Python's JSON but not jsonb; or
any DataError while writing the outcome) fails the step at once with
STEP_RESULT_NOT_SERIALIZABLE: retrying cannot make it storable, and nothing is left running"""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.faults import refused
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db(transaction=True)

STEP_TABLE = WorkflowStep._meta.db_table


@pytest.fixture
def calls() -> list[int]:
    made: list[int] = []

    def surrogate(data: dict, ctx: pw.StepContext) -> dict:
        made.append(ctx.attempt)
        return {"name": "caf\ud800"}

    pw.step_function("unstorable.local")(surrogate)
    pw.step_function("unstorable.queued", inline=False)(surrogate)

    @pw.step_function("unstorable.plain", inline=False)
    def plain(data: dict, ctx: pw.StepContext) -> dict:
        made.append(ctx.attempt)
        return {"name": "cafe"}

    @pw.workflow("unstorable.flow")
    def flow(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("step", input["function"], {}, retries=2, retry_delay=0)

    return made


def assert_failed_at_once(run_id: str, calls: list[int]) -> None:
    assert calls == [1]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="step")
    assert (step.status, step.attempt, step.attempt_limit) == (StepStatus.FAILED, 1, 1)
    assert step.error["code"] == "STEP_RESULT_NOT_SERIALIZABLE"
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "STEP_FAILED")


@pytest.mark.parametrize("function", ["unstorable.local", "unstorable.queued"])
def test_result_with_a_lone_surrogate__fails_the_step_at_once(calls, function):
    run_id = pw.start_workflow("unstorable.flow", {"function": function})

    drain_queue()

    assert_failed_at_once(run_id, calls)


# The database rejects this value with a data exception (SQLSTATE class 22) on write.
REFUSED_RESULT = {"on": "UPDATE", "when": "NEW.result IS NOT NULL", "errcode": "22P02"}


@pytest.mark.postgres
def test_result_the_database_refuses__fails_a_queued_step_at_once(calls, through_the_queue):
    run_id = pw.start_workflow("unstorable.flow", {"function": "unstorable.plain"})
    tasks.orchestrate(run_id)

    with refused(STEP_TABLE, **REFUSED_RESULT):
        tasks.execute_step(run_id, "step")
    drain_queue()

    assert_failed_at_once(run_id, calls)


@pytest.mark.postgres
def test_result_the_database_refuses__fails_a_step_run_in_place_at_once(calls):
    run_id = pw.start_workflow("unstorable.flow", {"function": "unstorable.plain"})

    with refused(STEP_TABLE, **REFUSED_RESULT):
        tasks.orchestrate(run_id)  # the pass runs the step in place

    assert_failed_at_once(run_id, calls)
