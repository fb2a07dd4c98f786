"""Deadlines: judged on the database clock from the recorded `expires_at`, never from when the
timer fires or from this process's clock. Each `on_expire` (reject, approve, fail, escalate),
a decision racing the deadline with the application clock skewed both ways, stale timers, and
reminders while pending."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.models import WorkflowApproval, WorkflowAuditEntry, WorkflowStep
from pikku_workflows.status import ApprovalStatus, RunStatus, StepStatus
from tests.approvals import (
    approval_of,
    due_reminder,
    finished,
    past_deadline,
    person,
    received,
    register_gate,
    start,
)
from tests.faults import database_now

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_on_expire_reject__the_outcome_is_expired_and_not_approved():
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    past_deadline(approval)

    with received(pw.approval_expired) as announced:
        assert fire_due_timers() == 1

    run = finished(run_id)
    assert (run.status, run.output["status"], run.output["approved"]) == (
        RunStatus.COMPLETED,
        "expired",
        False,
    )
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED
    # Decided at the recorded deadline, not when the timer got to it.
    assert approval.decided_at == approval.expires_at
    assert [(c["outcome"]["status"], c["committed"]) for c in announced] == [("expired", True)]


def test_on_expire_approve__expires_approved():
    register_gate(expires_in="1h", on_expire="approve")
    run_id = start()
    past_deadline(approval_of(run_id))

    fire_due_timers()

    output = finished(run_id).output
    assert (output["status"], output["approved"], output["decided_by"]) == ("expired", True, None)


def test_on_expire_fail__the_run_fails_with_approval_expired():
    register_gate(expires_in="1h", on_expire="fail")
    run_id = start()
    past_deadline(approval_of(run_id))

    fire_due_timers()

    run = finished(run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "APPROVAL_EXPIRED")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="gate")
    assert (step.status, step.error["code"], step.attempt, step.attempt_limit) == (
        StepStatus.FAILED,
        "APPROVAL_EXPIRED",
        1,
        1,
    )


def test_on_expire_fail__the_body_may_catch_it():
    @pw.workflow("approvals.catching")
    def catching(wf, input):
        try:
            return wf.approval("gate", expires_in="1h", on_expire="fail").approved
        except pw.ApprovalExpired as exc:
            return f"nobody decided: {exc.code}"

    run_id = start("approvals.catching")
    past_deadline(approval_of(run_id))
    fire_due_timers()

    assert finished(run_id).output == "nobody decided: APPROVAL_EXPIRED"


def test_on_expire_escalate__escalate_to_decides_with_a_new_deadline_of_the_same_length():
    clerk, director = person("clerk"), person("director")
    register_gate(
        approvers=["clerk"], expires_in="2h", on_expire="escalate", escalate_to=["director"]
    )
    run_id = start()
    approval = approval_of(run_id)
    past_deadline(approval, seconds=60)
    first_deadline = WorkflowApproval.objects.get(pk=approval.pk).expires_at

    with received(pw.approval_requested) as announced:
        assert fire_due_timers() == 0  # still pending: no pass to run

    approval.refresh_from_db()
    assert (approval.status, approval.approvers) == (ApprovalStatus.PENDING, ["director"])
    # Counted from the recorded deadline, not from when the timer fired.
    assert approval.expires_at == first_deadline + timedelta(hours=2)
    assert WorkflowStep.objects.get(pk=approval.step_id).wake_at == approval.expires_at
    escalate = WorkflowAuditEntry.objects.get(action="escalate")
    assert (escalate.payload["approvers_before"], escalate.payload["approvers_after"]) == (
        ["clerk"],
        ["director"],
    )
    assert [(c["reason"], [u.username for u in c["deciders"]]) for c in announced] == [
        ("escalated", ["director"])
    ]
    with pytest.raises(pw.ApprovalForbidden):
        pw.decide_approval(approval.pk, approve=True, by=clerk)
    pw.decide_approval(approval.pk, approve=True, by=director)
    assert finished(run_id).output["decided_by"] == "director"


def test_on_expire_escalate__the_escalated_deadline_ends_it_as_expired():
    register_gate(approvers=["a"], expires_in="2h", on_expire="escalate", escalate_to=["b"])
    run_id = start()
    approval = approval_of(run_id)
    past_deadline(approval)
    fire_due_timers()
    past_deadline(approval)

    fire_due_timers()

    output = finished(run_id).output
    assert (output["status"], output["approved"]) == ("expired", False)


# --- racing the deadline, on the database clock -------------------------------------------


def test_deadline__a_decision_before_it_wins_though_this_clock_says_it_passed(skewed_clock):
    boss = person("boss")
    register_gate(expires_in="10m")
    run_id = start()
    approval = approval_of(run_id)
    skewed_clock(3600)  # this process thinks the deadline passed 50 minutes ago

    answer = pw.decide_approval(approval.pk, approve=True, by=boss)

    assert answer["status"] == "approved"
    assert finished(run_id).output["approved"] is True


def test_deadline__a_decision_after_it_loses_though_this_clock_says_it_has_not(skewed_clock):
    boss = person("boss")
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    past_deadline(approval)
    skewed_clock(-7200)  # this process thinks there are hours left

    # No timer has fired: the decision itself finds the deadline passed and records the expiry.
    with pytest.raises(pw.ApprovalResolved) as caught:
        pw.decide_approval(approval.pk, approve=True, by=boss)

    assert caught.value.status == ApprovalStatus.EXPIRED
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED
    assert not approval.decisions.exists()
    output = finished(run_id).output
    assert (output["status"], output["approved"]) == ("expired", False)


def test_deadline__once_expiry_is_recorded_deciding_is_resolved():
    boss = person("boss")
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    past_deadline(approval)
    fire_due_timers()

    with pytest.raises(pw.ApprovalResolved):
        pw.decide_approval(approval.pk, approve=True, by=boss)
    assert finished(run_id).output["status"] == "expired"


def test_deadline__a_timer_that_fires_early_changes_nothing():
    # The step's timer is due, but the recorded deadline is ahead (as after an escalation that
    # the timer row did not follow): the deadline decides, and the timer is set to it again.
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    WorkflowStep.objects.filter(pk=approval.step_id).update(
        wake_at=database_now() - timedelta(seconds=1)
    )

    assert fire_due_timers() == 0

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert WorkflowStep.objects.get(pk=approval.step_id).wake_at == approval.expires_at
    assert finished(run_id).status == RunStatus.RUNNING


def test_deadline__a_suspended_run_expires_when_resumed_from_the_recorded_deadline():
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    pw.suspend_run(run_id)
    past_deadline(approval, seconds=3600)

    assert fire_due_timers() == 0  # the timer loop leaves suspended runs alone
    pw.resume_run(run_id)
    fire_due_timers()

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED
    assert approval.decided_at == approval.expires_at
    assert finished(run_id).output["status"] == "expired"


# --- reminders ----------------------------------------------------------------------------


def test_remind_every__reminds_the_deciders_left_while_pending():
    ann, ben = person("ann", "board"), person("ben", "board")
    person("cal", "board")
    register_gate(approvers=["group:board"], policy="quorum", quorum=2, remind_every="4h")
    run_id = start()
    approval = approval_of(run_id)
    pw.decide_approval(approval.pk, approve=True, by=ann)
    due_reminder(approval)

    with received(pw.approval_reminder) as reminded:
        assert fire_due_timers() == 1
        assert fire_due_timers() == 0  # the next one is four hours away

    assert [sorted(u.username for u in c["deciders"]) for c in reminded] == [[ben.username, "cal"]]
    approval.refresh_from_db()
    assert approval.reminders_sent == 1
    ahead = (approval.remind_at - database_now()).total_seconds()
    assert 4 * 3600 - 60 < ahead <= 4 * 3600


def test_remind_every__no_reminder_once_settled():
    boss = person("boss")
    register_gate(remind_every="1h")
    approval = approval_of(start())
    pw.decide_approval(approval.pk, approve=True, by=boss)
    due_reminder(approval)

    with received(pw.approval_reminder) as reminded:
        fire_due_timers()

    assert reminded == []
