"""`pw.suspend_run`: an operator's suspend stops a running run from starting anything new (steps
already running finish and are recorded); `pw.resume_run` carries it on from where it stood."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowAuditEntry, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _audit(run_id: str) -> list[tuple]:
    return list(
        WorkflowAuditEntry.objects.filter(run_id=run_id)
        .order_by("id")
        .values_list("action", "reason", "payload")
    )


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


@pytest.fixture
def calls():
    """`suspend.order`: `prepare` in process, `pack` on a step worker, then `ship` in process."""
    seen: list[str] = []

    @pw.step_function("suspend.pack", inline=False)
    def pack(data, ctx):
        seen.append("pack")
        return "packed"

    @pw.workflow("suspend.order")
    def order(wf, input):
        wf.do("prepare", lambda: seen.append("prepare") or "prepared")
        packed = wf.do("pack", "suspend.pack", {})
        return wf.do("ship", lambda: seen.append("ship") or f"shipped {packed}")

    return seen


def test_suspend_run__running_run_is_suspended_with_the_reason_and_audited(calls, ops):
    run_id = pw.start_workflow("suspend.order", {})

    summary = pw.suspend_run(run_id, reason="stock count", by=ops)

    assert summary["status"] == RunStatus.SUSPENDED
    assert summary["error"] == {"code": "WORKFLOW_SUSPENDED", "message": "stock count"}
    assert summary["waiting_on"] == {"kind": "suspend", "reason": "stock count"}
    assert load_run(run_id).finished_at is None
    entry = WorkflowAuditEntry.objects.get(run_id=run_id)
    assert (entry.action, entry.user, entry.reason) == ("suspend", ops, "stock count")
    assert entry.payload == {"status_before": "running", "status_after": "suspended"}


def test_suspend_run__round_trip_resumes_where_it_stood_without_rerunning_steps(calls, ops):
    run_id = pw.start_workflow("suspend.order", {})
    # One pass: `prepare` runs, `pack` is dispatched to a worker and the run parks on it.
    orchestrate(run_id)
    assert (calls, load_step(run_id, "pack").status) == (["prepare"], StepStatus.SCHEDULED)

    pw.suspend_run(run_id, reason="hold", by=ops)
    # The worker receives `pack` while the run is suspended: it must not start it.
    drain_queue()
    assert (calls, load_step(run_id, "pack").status) == (["prepare"], StepStatus.SCHEDULED)
    assert load_run(run_id).status == RunStatus.SUSPENDED

    pw.resume_run(run_id, by=ops)
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, "shipped packed", None)
    assert calls == ["prepare", "pack", "ship"]
    assert [action for action, _, _ in _audit(run_id)] == ["suspend", "resume"]


def test_suspend_run__a_step_running_meanwhile_is_recorded_and_nothing_new_starts(ops):
    seen = []

    @pw.workflow("suspend.mid_step")
    def mid_step(wf, input):
        def count():
            seen.append("count")
            if len(seen) == 1:
                pw.suspend_run(wf.run_id, reason="audit", by=ops)
            return 7

        counted = wf.do("count", count)
        return wf.do("report", lambda: seen.append("report") or counted)

    run_id = pw.start_workflow("suspend.mid_step", {}, inline=True)

    assert load_run(run_id).status == RunStatus.SUSPENDED
    assert (load_step(run_id, "count").status, load_step(run_id, "count").result) == (
        StepStatus.SUCCEEDED,
        7,
    )
    assert not WorkflowStep.objects.filter(run_id=run_id, step_key="report").exists()
    orchestrate(run_id)
    assert seen == ["count"]

    pw.resume_run(run_id)
    orchestrate(run_id)

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, 7)
    assert seen == ["count", "report"]


def test_suspend_run__already_suspended_is_quiet(ops):
    @pw.workflow("suspend.gated")
    def gated(wf, input):
        wf.suspend("body gate")

    run_id = pw.start_workflow("suspend.gated", {}, inline=True)

    summary = pw.suspend_run(run_id, reason="operator", by=ops)

    assert summary["status"] == RunStatus.SUSPENDED
    assert load_run(run_id).error["message"] == "body gate"
    assert _audit(run_id) == []


def test_suspend_run__twice_writes_one_audit_row(calls, ops):
    run_id = pw.start_workflow("suspend.order", {})

    pw.suspend_run(run_id, reason="first", by=ops)
    pw.suspend_run(run_id, reason="second", by=ops)

    assert [reason for _, reason, _ in _audit(run_id)] == ["first"]


def test_suspend_run__without_a_reason_says_an_operator_did_it(calls):
    run_id = pw.start_workflow("suspend.order", {})

    pw.suspend_run(run_id)

    assert load_run(run_id).error == {
        "code": "WORKFLOW_SUSPENDED",
        "message": "Suspended by an operator.",
        "type": "pikku_workflows.exceptions.WorkflowSuspended",
    }
    assert WorkflowAuditEntry.objects.get(run_id=run_id).user is None


@pytest.mark.parametrize("ending", ["completed", "failed", "cancelled"])
def test_suspend_run__ended_run_raises_invalid_transition(ending):
    @pw.workflow("suspend.ends")
    def ends(wf, input):
        if input["ending"] == "failed":
            raise RuntimeError("ended badly")
        if input["ending"] == "cancelled":
            wf.sleep("nap", "1h")
        return "ended"

    run_id = pw.start_workflow("suspend.ends", {"ending": ending}, inline=True)
    if ending == "cancelled":
        pw.cancel_run(run_id)
    audit_rows = len(_audit(run_id))

    with pytest.raises(pw.InvalidTransition):
        pw.suspend_run(run_id, reason="late")

    assert load_run(run_id).status == ending
    assert len(_audit(run_id)) == audit_rows


def test_suspend_run__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.suspend_run("00000000-0000-0000-0000-000000000000")
