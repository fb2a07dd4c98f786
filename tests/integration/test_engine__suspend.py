"""`wf.suspend` and `pw.resume_run`: the run suspends at a gate and a resumed run walks past it."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowAuditEntry, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_suspend__suspends_the_run_and_resume_continues_it():
    after = []

    @pw.workflow("suspend.once")
    def once(wf, input):
        first = wf.do("first", lambda: "a")
        wf.suspend("waiting for stock")
        after.append(first)
        return {"first": first, "second": wf.do("second", lambda: "b")}

    run_id = pw.start_workflow("suspend.once", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.SUSPENDED
    assert run.error == {
        "code": "WORKFLOW_SUSPENDED",
        "message": "waiting for stock",
        "step_key": "__suspend:waiting for stock",
    }
    gate = load_step(run_id, "__suspend:waiting for stock")
    assert (gate.status, gate.kind, gate.from_step_key) == (
        StepStatus.SUCCEEDED,
        "suspend",
        "first",
    )
    assert gate.result["reason"] == "waiting for stock"
    assert after == []

    summary = pw.resume_run(run_id)
    assert summary["status"] == RunStatus.RUNNING
    assert load_run(run_id).error is None
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"first": "a", "second": "b"})
    assert after == ["a"]


def test_suspend__orchestrating_a_suspended_run_does_nothing():
    calls = []

    @pw.workflow("suspend.stays")
    def stays(wf, input):
        calls.append(1)
        wf.suspend("hold")

    run_id = pw.start_workflow("suspend.stays", {}, inline=True)
    orchestrate(run_id)

    assert calls == [1]
    assert load_run(run_id).status == RunStatus.SUSPENDED


def test_suspend__two_suspends_in_a_row_need_two_resumes():
    reached = []

    @pw.workflow("suspend.twice")
    def twice(wf, input):
        wf.suspend("first gate")
        reached.append("first")
        wf.suspend("second gate")
        reached.append("second")
        return "through"

    run_id = pw.start_workflow("suspend.twice", {}, inline=True)
    assert (load_run(run_id).status, load_run(run_id).error["message"]) == (
        RunStatus.SUSPENDED,
        "first gate",
    )

    pw.resume_run(run_id)
    orchestrate(run_id)
    assert (load_run(run_id).status, load_run(run_id).error["message"]) == (
        RunStatus.SUSPENDED,
        "second gate",
    )
    assert reached == ["first"]

    pw.resume_run(run_id)
    orchestrate(run_id)
    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "through")
    assert reached == ["first", "first", "second"]


def test_suspend__same_reason_twice_is_two_gates():
    @pw.workflow("suspend.same_reason")
    def same_reason(wf, input):
        wf.suspend("check")
        wf.suspend("check")
        return "through"

    run_id = pw.start_workflow("suspend.same_reason", {}, inline=True)
    pw.resume_run(run_id)
    orchestrate(run_id)

    assert load_run(run_id).status == RunStatus.SUSPENDED
    assert load_run(run_id).error["step_key"] == "__suspend:check#1"

    pw.resume_run(run_id)
    orchestrate(run_id)

    assert load_run(run_id).status == RunStatus.COMPLETED
    keys = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    assert [s.step_key for s in keys] == ["__suspend:check", "__suspend:check#1"]


def test_resume_run__queues_a_pass_and_records_an_audit_entry():
    @pw.workflow("suspend.audited")
    def audited(wf, input):
        wf.suspend("hold")

    run_id = pw.start_workflow("suspend.audited", {}, inline=True)
    queued = OrmQ.objects.count()

    pw.resume_run(run_id)

    assert OrmQ.objects.count() == queued + 1
    entry = WorkflowAuditEntry.objects.get(run_id=run_id)
    assert entry.action == "resume"
    assert entry.payload == {"status_before": "suspended", "status_after": "running"}


def test_resume_run__running_run_is_left_as_is():
    @pw.workflow("suspend.never")
    def never(wf, input):
        wf.sleep("nap", "1h")

    run_id = pw.start_workflow("suspend.never", {}, inline=True)

    assert pw.resume_run(run_id)["status"] == RunStatus.RUNNING
    assert not WorkflowAuditEntry.objects.filter(run_id=run_id).exists()


def test_resume_run__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.resume_run("00000000-0000-0000-0000-000000000000")


def test_suspend__body_catching_exception_cannot_swallow_the_suspend():
    @pw.workflow("suspend.swallower")
    def swallower(wf, input):
        try:
            wf.suspend("hold")
        except Exception:
            return "swallowed"
        return "through"

    run_id = pw.start_workflow("suspend.swallower", {}, inline=True)

    assert load_run(run_id).status == RunStatus.SUSPENDED
    pw.resume_run(run_id)
    orchestrate(run_id)
    assert load_run(run_id).output == "through"


def test_suspend__body_catching_exception_cannot_swallow_a_park():
    @pw.workflow("suspend.park_swallower")
    def park_swallower(wf, input):
        try:
            wf.sleep("nap", "1h")
        except Exception:
            return "swallowed"
        return "woke"

    run_id = pw.start_workflow("suspend.park_swallower", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.RUNNING, None)


@pytest.mark.parametrize("reason", ["", None])
def test_suspend__empty_reason_fails_the_run_with_invalid_input(reason):
    @pw.workflow("suspend.no_reason")
    def no_reason(wf, input):
        wf.suspend(input["reason"])

    run_id = pw.start_workflow("suspend.no_reason", {"reason": reason}, inline=True)

    assert (load_run(run_id).status, load_run(run_id).error["code"]) == (
        RunStatus.FAILED,
        "INVALID_INPUT",
    )


@pytest.mark.parametrize("ending", ["completed", "failed"])
def test_resume_run__ended_run_raises_invalid_transition(ending):
    @pw.workflow("suspend.ends")
    def ends(wf, input):
        if input["ending"] == "failed":
            raise RuntimeError("ended badly")
        return "ended"

    run_id = pw.start_workflow("suspend.ends", {"ending": ending}, inline=True)
    assert load_run(run_id).status == ending

    with pytest.raises(pw.InvalidTransition) as caught:
        pw.resume_run(run_id)

    assert caught.value.code == "INVALID_TRANSITION"
    assert load_run(run_id).status == ending
    assert not WorkflowAuditEntry.objects.filter(run_id=run_id).exists()
