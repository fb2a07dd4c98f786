"""Child runs through a queue outage: a child started while the queue refuses messages does not
fail its parent nor orphan itself, and cancelling a child during an outage succeeds; recovery
carries both on once the queue is back."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.faults import QUEUE_TABLE, refused
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def family() -> None:
    @pw.step_function("family.wrap")
    def wrap(data: dict, ctx: pw.StepContext) -> dict:
        return {"wrapped": data["gift"]}

    @pw.workflow("family.child")
    def child(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("wrap", "family.wrap", input)

    @pw.workflow("family.parent")
    def parent(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("child", "family.child", {"gift": input["gift"]}, retries=0)


def recover(**settings: float) -> dict[str, int]:
    with override_settings(PIKKU_WORKFLOWS=settings):
        return pw.recover()


def child_of(parent_id: str) -> WorkflowRun:
    return WorkflowRun.objects.get(parent_run_id=parent_id)


def parked_on_child(parent_id: str) -> WorkflowStep:
    step = WorkflowStep.objects.get(run_id=parent_id, step_key="child")
    assert step.status == StepStatus.WAITING
    return step


def test_child_start__during_an_outage_the_parent_parks_on_its_child(family, fresh_backoff):
    parent_id = pw.start_workflow("family.parent", {"gift": "socks"})

    with refused(QUEUE_TABLE):
        tasks.orchestrate(parent_id)  # the child's first pass cannot be enqueued

    parent = WorkflowRun.objects.get(pk=parent_id)
    assert (parent.status, parent.error) == (RunStatus.RUNNING, None)
    child = child_of(parent_id)
    assert child.status == RunStatus.RUNNING
    assert parked_on_child(parent_id).child_run_id == child.pk


def test_child_start__recovery_starts_the_child_and_the_parent_completes(family, fresh_backoff):
    parent_id = pw.start_workflow("family.parent", {"gift": "socks"})
    with refused(QUEUE_TABLE):
        tasks.orchestrate(parent_id)

    assert recover(STALLED_RUN_AFTER_SECONDS=0)["stalled"] == 1  # the child, never started
    drain_queue()

    assert child_of(parent_id).status == RunStatus.COMPLETED
    assert WorkflowRun.objects.get(pk=parent_id).output == {"wrapped": "socks"}


def test_child_cancel__during_an_outage_succeeds_and_the_parent_learns_later(family, fresh_backoff):
    parent_id = pw.start_workflow("family.parent", {"gift": "socks"})
    tasks.orchestrate(parent_id)  # starts the child; its pass waits in the queue
    child_id = child_of(parent_id).pk

    with refused(QUEUE_TABLE):
        summary = pw.cancel_run(child_id, reason="out of stock")  # the parent's pass can't be sent

    assert summary["status"] == RunStatus.CANCELLED
    assert WorkflowRun.objects.get(pk=parent_id).status == RunStatus.RUNNING
    recover(STALLED_RUN_AFTER_SECONDS=0)
    drain_queue()
    parent = WorkflowRun.objects.get(pk=parent_id)
    assert parent.status == RunStatus.FAILED
    step = WorkflowStep.objects.get(run_id=parent_id, step_key="child")
    assert step.error["code"] == "CHILD_RUN_CANCELLED"
