"""A step function this process lacks suspends the run with RPC_NOT_FOUND and records no attempt;
deploy it and resume, and it runs (docs/decisions.md)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ran() -> list[int]:
    """`gone.ship` (queued) in `gone.order`; returns the attempts the function ran."""
    attempts: list[int] = []

    @pw.step_function("gone.ship", inline=False)
    def ship(data: dict, ctx: pw.StepContext) -> str:
        attempts.append(ctx.attempt)
        return "shipped"

    @pw.workflow("gone.order")
    def order(wf: pw.Workflow, input: dict) -> str:
        return wf.do("ship", "gone.ship", {})

    return attempts


def history(run_id: str) -> list[tuple]:
    rows = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key="ship")
    return list(rows.values_list("attempt", "status", "running_at"))


def test_step_worker_without_the_function__run_suspended_no_attempt(ran):
    run_id = pw.start_workflow("gone.order")
    orchestrate(run_id)  # the orchestrating process knows the function: it dispatches
    ship = registry.step_functions.pop("gone.ship")  # ...to a worker that does not

    tasks.execute_step(run_id, "ship")

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.SUSPENDED
    assert run.error["code"] == "RPC_NOT_FOUND"
    assert run.error["step_key"] == "ship"
    assert "gone.ship" in run.error["message"]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="ship")
    assert (step.attempt, step.result, step.error, step.lease_expires_at) == (1, None, None, None)
    assert step.status == StepStatus.PENDING  # handed back: the next pass dispatches it again
    assert [(attempt, running_at) for attempt, _, running_at in history(run_id)] == [(1, None)]
    assert ran == []
    registry.step_functions["gone.ship"] = ship


def test_orchestrator_without_the_function__run_suspended_step_pending(ran):
    registry.step_functions.pop("gone.ship")
    run_id = pw.start_workflow("gone.order")

    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.SUSPENDED, "RPC_NOT_FOUND")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="ship")
    assert (step.status, step.attempt) == (StepStatus.PENDING, 1)
    assert history(run_id) == [(1, StepStatus.PENDING, None)]
    assert queued_tasks() == []


def test_orchestrator_without_the_function__deploy_and_resume_runs_it(ran):
    ship = registry.step_functions.pop("gone.ship")
    run_id = pw.start_workflow("gone.order")
    drain_queue()
    registry.step_functions["gone.ship"] = ship  # deployed

    pw.resume_run(run_id)
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, "shipped", None)
    assert ran == [1]
    assert [(attempt, status) for attempt, status, _ in history(run_id)] == [
        (1, StepStatus.SUCCEEDED)
    ]


def suspended_by_a_step_worker(run_id: str) -> None:
    orchestrate(run_id)
    ship = registry.step_functions.pop("gone.ship")
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.SUSPENDED
    registry.step_functions["gone.ship"] = ship  # deployed


def test_step_worker_without_the_function__deploy_and_resume_runs_it(ran):
    run_id = pw.start_workflow("gone.order")
    suspended_by_a_step_worker(run_id)

    pw.resume_run(run_id)
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, "shipped", None)
    assert ran == [1]
