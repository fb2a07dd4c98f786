"""Approvals and signals with a real `pikku_worker`: a decision made in another process lets
the worker finish the run; the worker's timer loop applies an approval's deadline and a
signal's timeout within a second or two."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowApproval, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.approvals import person
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

RUN_TIMEOUT = 20


def settled(run_id: str) -> WorkflowRun:
    def ended() -> WorkflowRun | None:
        run = WorkflowRun.objects.get(pk=run_id)
        return run if run.status != RunStatus.RUNNING else None

    return wait_until(ended, RUN_TIMEOUT, f"run {run_id} to end")


def test_worker__a_decision_made_elsewhere_lets_the_worker_finish_the_run(start_worker):
    start_worker()
    boss = person("boss")

    run_id = pw.start_workflow("e2e.approved_count", {"value": 41})  # queued: the worker opens it
    approval = wait_until(
        lambda: WorkflowApproval.objects.filter(run_id=run_id).first(), RUN_TIMEOUT, "the approval"
    )
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    pw.decide_approval(approval.pk, approve=True, by=boss, comment="count on")

    run = settled(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"status": "approved", "by": "boss", "value": 42},
    )
    add = WorkflowStep.objects.get(run_id=run_id, step_key="add")
    assert add.status == StepStatus.SUCCEEDED


def test_worker__its_timer_loop_applies_the_deadline(start_worker):
    start_worker()

    run_id = pw.start_workflow(
        "e2e.approved_count",
        {"value": 1, "expires_in": "1s", "options": {"on_expire": "approve"}},
    )

    run = settled(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"status": "expired", "by": None, "value": 2},
    )
    approval = WorkflowApproval.objects.get(run_id=run_id)
    assert approval.decided_at == approval.expires_at


def test_worker__a_signal_reaches_the_waiting_run_and_a_timeout_fires(start_worker):
    start_worker()

    run_id = pw.start_workflow("e2e.signalled", {})
    wait_until(
        lambda: WorkflowStep.objects.filter(run_id=run_id, step_key="go").exists(),
        RUN_TIMEOUT,
        "the wait",
    )
    pw.send_signal(run_id, "go", {"from": "the test process"})

    run = settled(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"go": {"from": "the test process"}, "never": "SIGNAL_TIMEOUT"},
    )
