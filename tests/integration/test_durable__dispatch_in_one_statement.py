"""With django-q2's queue in the engine's database, a queued step, its message and the release of
the run lease are one write, and a step worker takes the lease in the write that records the
result (docs/architecture.md §4: "dispatched first, then marked scheduled")."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.control_flow import RunInterrupted
from pikku_workflows.dispatch import step_message
from pikku_workflows.engine.replay import queued
from pikku_workflows.engine.store.leases import acquire_run_lease, request_rerun
from pikku_workflows.engine.store.step_transitions import create_dispatched_step
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """These tests are about the queue path: no step runs in place."""


EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


@pytest.fixture
def passes() -> list[int]:
    """`one.order`: a queued charge, after an in-pass step that may ask for another pass."""
    seen: list[int] = []

    @pw.step_function("one.charge", inline=False)
    def charge(data: dict, ctx: pw.StepContext) -> int:
        return data["amount"]

    @pw.workflow("one.order")
    def order(wf: pw.Workflow, input: dict) -> int:
        seen.append(1)
        if input.get("nudge"):
            # As if another message for this run arrived while this pass holds the lease.
            wf.do("nudge", lambda: request_rerun(wf.run_id))
        return wf.do("charge", "one.charge", input)

    return seen


def start(input: dict) -> str:
    """Start a queued run and run its start message's pass, as a worker would."""
    run_id = pw.start_workflow("one.order", input)
    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]
    OrmQ.objects.all().delete()  # taken by the worker
    tasks.orchestrate(run_id)
    return run_id


def lease_of(run_id: str) -> tuple:
    return WorkflowRun.objects.values_list("lease_holder", "rerun_requested").get(pk=run_id)


def completed_with(run_id: str, output: int) -> None:
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.lease_holder) == (RunStatus.COMPLETED, output, None)


def test_dispatch__step_history_message_and_lease_release_land_together(passes):
    run_id = start({"amount": 5})

    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    history = WorkflowStepHistory.objects.get(step=step)
    assert (step.status, history.status) == (StepStatus.SCHEDULED, StepStatus.SCHEDULED)
    assert history.scheduled_at == history.created_at == step.created_at
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]
    assert lease_of(run_id) == (None, False)
    drain_queue()
    completed_with(run_id, 5)


def test_dispatch__a_rerun_requested_during_the_pass_keeps_the_lease_for_one_more_pass(passes):
    run_id = start({"amount": 7, "nudge": True})

    assert passes == [1, 1]  # the second pass finds the step scheduled and parks again
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]
    assert lease_of(run_id) == (None, False)
    drain_queue()
    completed_with(run_id, 7)


def test_dispatch__a_pass_that_lost_the_lease_writes_no_step_and_no_message(passes):
    run_id = pw.start_workflow("one.order", {"amount": 5})
    drain_queue()  # the start message: dispatches and runs the charge
    WorkflowRun.objects.filter(pk=run_id).update(status=RunStatus.RUNNING, lease_holder="other")
    message = step_message(run_id, "later", None)

    with pytest.raises(RunInterrupted):
        create_dispatched_step(run_id, "not-the-holder", "later", message, function_name="x")

    assert not WorkflowStep.objects.filter(step_key="later").exists()
    assert queued_tasks() == []


def test_dispatch__with_the_queue_elsewhere_enqueues_then_marks_scheduled(passes, monkeypatch):
    monkeypatch.setattr(queued, "queue_in_engine_database", lambda: False)
    run_id = start({"amount": 3})

    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert step.status == StepStatus.SCHEDULED
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]
    assert lease_of(run_id) == (None, False)
    drain_queue()
    completed_with(run_id, 3)


def test_step_worker__records_takes_the_free_lease_and_finishes_the_run_in_place(passes):
    run_id = start({"amount": 4})

    tasks.execute_step(run_id, "charge")

    completed_with(run_id, 4)
    # Only the step's own message (run directly above); no orchestrator message: the pass
    # ran right here.
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]


def test_step_worker__lease_held_elsewhere_records_and_asks_the_holder_to_rerun(passes):
    run_id = start({"amount": 4})
    assert acquire_run_lease(run_id, "elsewhere")

    tasks.execute_step(run_id, "charge")

    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.status, step.result) == (StepStatus.SUCCEEDED, 4)
    assert lease_of(run_id) == ("elsewhere", True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING
