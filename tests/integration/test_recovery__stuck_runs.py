"""Runs that a crash left with nothing to move them are found by recovery without waiting out
the stall window: a parent whose child ended before the parent was told, and a run whose pass
died holding the run lease."""

from __future__ import annotations

import pytest
from django.db.models.functions import Now
from django.test import override_settings
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.faults import dead_lease
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def family() -> None:
    @pw.step_function("stuck.pack")
    def pack(data: dict, ctx: pw.StepContext) -> str:
        return "packed"

    @pw.workflow("stuck.child")
    def child(wf: pw.Workflow, input: dict) -> str:
        return wf.do("pack", "stuck.pack", {})

    @pw.workflow("stuck.parent")
    def parent(wf: pw.Workflow, input: dict) -> dict:
        return {"child": wf.do("child", "stuck.child", {})}

    @pw.workflow("stuck.single")
    def single(wf: pw.Workflow, input: dict) -> str:
        return wf.do("pack", "stuck.pack", {})


def lose_every_message() -> None:
    OrmQ.objects.all().delete()


def recover(**settings: float) -> dict[str, int]:
    with override_settings(PIKKU_WORKFLOWS=settings):
        return pw.recover()


def test_recovery__a_parent_whose_child_ended_unannounced_is_resumed(family, fresh_backoff):
    parent_id = pw.start_workflow("stuck.parent", {})
    tasks.orchestrate(parent_id)  # the child starts; the parent parks on it
    child = WorkflowRun.objects.get(parent_run_id=parent_id)
    # The child's pass completed it, and its process died before telling the parent.
    WorkflowRun.objects.filter(pk=child.pk).update(
        status=RunStatus.COMPLETED, output="packed", finished_at=Now()
    )
    lose_every_message()

    counts = recover(RELAY_PENDING_AFTER_SECONDS=0)  # the stall window (5 min) has not passed

    assert counts["relayed"] == 1
    drain_queue()
    assert WorkflowRun.objects.get(pk=parent_id).output == {"child": "packed"}


def test_recovery__a_waiting_parent_of_a_live_child_is_left_alone(family, fresh_backoff):
    parent_id = pw.start_workflow("stuck.parent", {})
    tasks.orchestrate(parent_id)
    lose_every_message()

    recover(RELAY_PENDING_AFTER_SECONDS=0, STALLED_RUN_AFTER_SECONDS=0)

    child = WorkflowRun.objects.get(parent_run_id=parent_id)
    # The child (never started) is resumed; its parent, waiting on a live child, is not.
    assert queued_tasks() == [("pikku_workflows.tasks.orchestrate", (str(child.pk),))]
    assert WorkflowStep.objects.get(run_id=parent_id, step_key="child").status == "waiting"


def test_recovery__a_run_whose_pass_died_holding_its_lease_is_resumed(family, fresh_backoff):
    run_id = pw.start_workflow("stuck.single", {})
    lose_every_message()  # a worker took the message...
    dead_lease(run_id)  # ...leased the run, and died before writing anything

    counts = pw.recover()  # default windows: nothing has stood still for 5 minutes

    assert counts["lapsed_runs"] == 1
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).output == "packed"
