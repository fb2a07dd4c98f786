"""An in-process step whose process died mid-attempt (its lease lapses) is re-claimed as a new
attempt only while attempts remain; on its last attempt it fails with STEP_LEASE_EXPIRED, as a
queued step does, so a step that always kills its process cannot loop for ever."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.rows import attempt_statuses

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"STEP_LEASE_SECONDS": 0.3}


class ProcessDied(BaseException):
    """Stands for the process dying mid-step: nothing below the step function handles it."""


@pytest.fixture
def attempts() -> list[int]:
    seen: list[int] = []

    @pw.step_function("crash.work")
    def work(data: dict, ctx: pw.StepContext) -> str:
        seen.append(ctx.attempt)
        if ctx.attempt <= data["deaths"]:
            raise ProcessDied
        return "done"

    @pw.workflow("crash.flow")
    def flow(wf: pw.Workflow, input: dict) -> str:
        return wf.do("work", "crash.work", input, retries=input["retries"])

    return seen


def crash_once(run_id: str) -> None:
    with pytest.raises(ProcessDied):
        tasks.orchestrate(run_id)
    wait_until(
        lambda: WorkflowStep.objects.filter(run_id=run_id).lease_lapsed().exists(),
        what="the dead attempt's lease to lapse",
    )


@override_settings(PIKKU_WORKFLOWS=SHORT_LEASE)
def test_lapsed_in_process_step__on_its_last_attempt_fails_with_lease_expired(attempts):
    run_id = pw.start_workflow("crash.flow", {"deaths": 99, "retries": 0})
    crash_once(run_id)

    tasks.orchestrate(run_id)  # the next pass finds the lapsed lease

    assert attempts == [1]  # the step did not run a second time
    step = WorkflowStep.objects.get(run_id=run_id, step_key="work")
    assert (step.status, step.attempt, step.attempt_limit) == (StepStatus.FAILED, 1, 1)
    assert step.error["code"] == "STEP_LEASE_EXPIRED"
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["step_key"] == "work"


@override_settings(PIKKU_WORKFLOWS=SHORT_LEASE)
def test_lapsed_in_process_step__with_attempts_left_runs_a_new_attempt(attempts):
    run_id = pw.start_workflow("crash.flow", {"deaths": 1, "retries": 1})
    crash_once(run_id)

    tasks.orchestrate(run_id)

    assert attempts == [1, 2]
    assert WorkflowRun.objects.get(pk=run_id).output == "done"
    assert attempt_statuses(run_id, "work") == [
        (1, StepStatus.FAILED),  # the dead attempt: fenced out, ended as its lease lapsed
        (2, StepStatus.SUCCEEDED),
    ]


@override_settings(PIKKU_WORKFLOWS=SHORT_LEASE)
def test_lapsed_in_process_step__that_always_dies_spends_its_budget_and_fails(attempts):
    run_id = pw.start_workflow("crash.flow", {"deaths": 99, "retries": 2})
    for _ in range(3):
        crash_once(run_id)

    tasks.orchestrate(run_id)

    assert attempts == [1, 2, 3]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="work")
    assert (step.status, step.attempt, step.error["code"]) == (
        StepStatus.FAILED,
        3,
        "STEP_LEASE_EXPIRED",
    )
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.FAILED
