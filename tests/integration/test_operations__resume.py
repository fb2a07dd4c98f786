"""`pw.resume_run`: suspended (by an operator, `wf.suspend` or RPC_NOT_FOUND) → running with a
pass enqueued; a running run is a quiet no-op; an ended run cannot be resumed."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry
from pikku_workflows.status import RunStatus
from tests.queue import drain_queue, queued_tasks
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


@pytest.fixture
def napping():
    @pw.workflow("resume.napping")
    def napping_workflow(wf, input):
        wf.sleep("nap", "1h")
        return "woke"

    return "resume.napping"


def test_resume_run__operator_suspended_run_runs_again_with_one_pass_queued(napping, ops):
    run_id = pw.start_workflow(napping, {}, inline=True)
    pw.suspend_run(run_id, reason="hold", by=ops)
    OrmQ.objects.all().delete()

    summary = pw.resume_run(run_id, by=ops, reason="stock arrived")

    assert summary["status"] == RunStatus.RUNNING
    assert summary["error"] is None
    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]
    entry = WorkflowAuditEntry.objects.get(run_id=run_id, action="resume")
    assert (entry.user, entry.reason) == (ops, "stock arrived")
    assert entry.payload == {"status_before": "suspended", "status_after": "running"}


def test_resume_run__running_run_is_quiet_and_queues_nothing(napping, ops):
    run_id = pw.start_workflow(napping, {}, inline=True)
    OrmQ.objects.all().delete()

    summary = pw.resume_run(run_id, by=ops)

    assert summary["status"] == RunStatus.RUNNING
    assert queued_tasks() == []
    assert not WorkflowAuditEntry.objects.filter(run_id=run_id).exists()


def test_resume_run__twice_writes_one_audit_row(napping, ops):
    run_id = pw.start_workflow(napping, {}, inline=True)
    pw.suspend_run(run_id, by=ops)

    pw.resume_run(run_id, by=ops)
    pw.resume_run(run_id, by=ops)

    actions = WorkflowAuditEntry.objects.filter(run_id=run_id).values_list("action", flat=True)
    assert list(actions.order_by("id")) == ["suspend", "resume"]


def test_resume_run__cancelled_run_raises_invalid_transition(napping):
    run_id = pw.start_workflow(napping, {}, inline=True)
    pw.cancel_run(run_id)

    with pytest.raises(pw.InvalidTransition):
        pw.resume_run(run_id)

    assert load_run(run_id).status == RunStatus.CANCELLED
    assert list(
        WorkflowAuditEntry.objects.filter(run_id=run_id).values_list("action", flat=True)
    ) == ["cancel"]


def test_resume_run__run_suspended_for_a_missing_step_function_runs_it_once_deployed():
    @pw.workflow("resume.needs_deploy")
    def needs_deploy(wf, input):
        return wf.do("charge", "resume.not_yet_deployed", {"amount": 5})

    run_id = pw.start_workflow("resume.needs_deploy", {}, inline=True)
    assert (load_run(run_id).status, load_run(run_id).error["code"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
    )

    @pw.step_function("resume.not_yet_deployed")
    def charge(data, ctx):
        return {"charged": data["amount"]}

    pw.resume_run(run_id)
    drain_queue()

    assert (load_run(run_id).status, load_run(run_id).output) == (
        RunStatus.COMPLETED,
        {"charged": 5},
    )
