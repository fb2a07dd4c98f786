"""An approval's life in a run: the first reach parks the step (the run stays running) and
announces it after the commit; replays never open a second one nor reopen a settled one; the
form's data (valid and invalid) through the engine; reassigning; a suspended or cancelled run."""

from __future__ import annotations

import pytest
from django import forms

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import (
    WorkflowApproval,
    WorkflowApprovalDecision,
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
)
from pikku_workflows.registry import registry
from pikku_workflows.status import ApprovalStatus, RunStatus, StepKind, StepStatus
from tests.approvals import approval_of, finished, person, received, register_gate, start
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FORM = "tests.integration.test_approvals__lifecycle.PurchaseDecision"


class PurchaseDecision(forms.Form):
    cost_centre = forms.RegexField(regex=r"^CC-\d{3}$")
    budget = forms.DecimalField(min_value=0, max_digits=10, decimal_places=2)
    expedite = forms.BooleanField(required=False)


# --- parking ------------------------------------------------------------------------------


def test_first_reach__parks_the_step_and_the_run_keeps_running():
    requester = person("requester")
    register_gate(
        approvers=["group:managers"],
        expires_in="2h",
        summary="Order #7 for 1200.00",
        data={"order": 7, "total": 1200},
    )

    with received(pw.approval_requested) as announced:
        run_id = start(by=requester)

    run = WorkflowRun.objects.get(pk=run_id)
    approval = approval_of(run_id)
    step = WorkflowStep.objects.get(run_id=run_id, step_key="gate")
    assert run.status == RunStatus.RUNNING
    assert (step.kind, step.status, step.attempt) == (StepKind.APPROVAL, StepStatus.WAITING, 1)
    assert approval.status == ApprovalStatus.PENDING
    assert (approval.summary, approval.request_data) == (
        "Order #7 for 1200.00",
        {"order": 7, "total": 1200},
    )
    assert approval.requesters == [str(requester.pk)]
    # The recorded deadline is the step's timer, on the database clock.
    assert approval.expires_at == step.wake_at
    assert 7190 < (approval.expires_at - approval.created_at).total_seconds() < 7210
    assert pw.get_run_status(run_id)["waiting_on"] == {
        "step_key": "gate",
        "kind": "approval",
        "approval_id": str(approval.pk),
        "until": approval.expires_at.isoformat(),
    }
    # Announced once, after the commit (another connection already saw the approval).
    assert [(call["approval"].pk, call["reason"], call["committed"]) for call in announced] == [
        (approval.pk, "requested", True)
    ]


def test_first_reach__announces_who_may_decide():
    manager = person("manager", "managers")
    person("outsider")
    person("managers_without_permission", "managers", decide=False)
    register_gate(approvers=["group:managers"])

    with received(pw.approval_requested) as announced:
        start()

    assert [user.username for user in announced[0]["deciders"]] == [manager.username]


def test_replay__never_opens_a_second_approval_nor_reopens_a_settled_one():
    boss = person("boss")
    register_gate()
    run_id = start()
    approval = approval_of(run_id)

    for _ in range(3):
        orchestrate(run_id)  # passes that replay the body and find the step waiting
    assert WorkflowApproval.objects.count() == 1
    pw.decide_approval(approval.pk, approve=False, by=boss, comment="no")
    run = finished(run_id)
    WorkflowRun.objects.filter(pk=run_id).update(status=RunStatus.RUNNING)  # replay it again
    orchestrate(run_id)

    assert WorkflowApproval.objects.count() == 1
    approval.refresh_from_db()
    assert (approval.status, approval.comment) == (ApprovalStatus.REJECTED, "no")
    assert WorkflowRun.objects.get(pk=run_id).output == run.output
    assert run.output["approved"] is False


def test_replay__a_second_reach_of_the_same_key_is_its_own_approval():
    boss = person("boss")

    @pw.workflow("approvals.twice")
    def twice(wf, input):
        first = wf.approval("sign")
        second = wf.approval("sign")
        return [first.approved, second.approved]

    run_id = start("approvals.twice")
    pw.decide_approval(approval_of(run_id, "sign").pk, approve=True, by=boss)
    finished(run_id)
    pw.decide_approval(approval_of(run_id, "sign#1").pk, approve=False, by=boss)

    assert finished(run_id).output == [True, False]
    assert WorkflowApproval.objects.count() == 2


def test_replay__a_body_that_asks_something_else_at_the_key_is_not_deterministic():
    register_gate()
    run_id = start()

    def changed(wf, input):  # a deploy changed the body: a step where the approval was
        return wf.do("gate", lambda: "no approval here")

    registry.workflows.pop("approvals.gate")
    pw.workflow("approvals.gate")(changed)
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "NON_DETERMINISTIC")


def test_options__invalid_ones_fail_the_run_with_every_problem():
    @pw.workflow("approvals.misconfigured")
    def misconfigured(wf, input):
        return wf.approval("gate", policy="all", on_expire="escalate").approved

    run = WorkflowRun.objects.get(pk=start("approvals.misconfigured"))

    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "INVALID_INPUT")
    assert "needs approvers" in run.error["message"]
    assert "needs escalate_to" in run.error["message"]
    assert not WorkflowApproval.objects.exists()


# --- the form -----------------------------------------------------------------------------


def test_form__valid_data_reaches_the_body_cleaned():
    boss = person("boss")
    register_gate(form=PurchaseDecision)
    run_id = start()
    approval = approval_of(run_id)
    assert approval.form == FORM

    answer = pw.decide_approval(
        approval.pk, approve=True, by=boss, data={"cost_centre": "CC-042", "budget": "99.5"}
    )

    cleaned = {"cost_centre": "CC-042", "budget": "99.5", "expedite": False}
    assert answer["data"] == cleaned
    assert finished(run_id).output["data"] == cleaned


def test_form__invalid_data_is_refused_with_field_errors_and_the_approval_stays_pending():
    boss = person("boss")
    register_gate(form=FORM)
    run_id = start()
    approval = approval_of(run_id)

    with pytest.raises(pw.InvalidInput) as caught:
        pw.decide_approval(
            approval.pk, approve=True, by=boss, data={"cost_centre": "42", "budget": "-1"}
        )

    assert set(caught.value.field_errors) == {"cost_centre", "budget"}
    assert caught.value.code == "INVALID_INPUT"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not WorkflowApprovalDecision.objects.exists()
    assert not WorkflowAuditEntry.objects.exists()
    pw.decide_approval(
        approval.pk, approve=True, by=boss, data={"cost_centre": "CC-001", "budget": "1"}
    )
    assert finished(run_id).output["approved"] is True


def test_form__a_forbidden_decider_is_denied_before_their_data_is_read():
    register_gate(approvers=["boss"], form=FORM)
    approval = approval_of(start())

    with pytest.raises(pw.ApprovalForbidden):
        pw.decide_approval(approval.pk, approve=True, by=person("mallory"), data={"junk": 1})
    assert WorkflowAuditEntry.objects.get().action == "deny"


def test_form__without_one_data_is_any_json_object():
    boss = person("boss")
    register_gate()
    run_id = start()

    pw.decide_approval(approval_of(run_id).pk, approve=True, by=boss, data={"free": ["form", 1]})

    assert finished(run_id).output["data"] == {"free": ["form", 1]}


# --- announcing decisions -----------------------------------------------------------------


def test_decided__announced_after_the_commit_with_the_outcome():
    boss = person("boss")
    register_gate()
    approval = approval_of(start())

    with received(pw.approval_decided) as announced:
        pw.decide_approval(approval.pk, approve=True, by=boss, comment="go")

    (call,) = announced
    assert call["committed"] is True
    assert (call["outcome"]["status"], call["decision"].username) == ("approved", "boss")
    assert queued_tasks() == [("pikku_workflows.tasks.orchestrate", (str(approval.run_id),))]


def test_decided__a_failing_receiver_is_logged_and_changes_nothing(caplog):
    boss = person("boss")
    register_gate()
    run_id = start()

    def broken(sender, **kwargs):
        raise ConnectionError("smtp down")

    pw.approval_decided.connect(broken, dispatch_uid="tests.broken")
    try:
        pw.decide_approval(approval_of(run_id).pk, approve=True, by=boss)
    finally:
        pw.approval_decided.disconnect(dispatch_uid="tests.broken")

    assert "receiver" in caplog.text and "smtp down" in caplog.text
    assert finished(run_id).status == RunStatus.COMPLETED


# --- reassigning --------------------------------------------------------------------------


def test_reassign__new_approvers_decide_and_the_old_ones_no_longer_can():
    old, new = person("old"), person("new")
    operator = person("operator", perms=("reassign_workflowapproval",))
    register_gate(approvers=["old"])
    run_id = start()
    approval = approval_of(run_id)

    with received(pw.approval_requested) as announced:
        answer = pw.reassign_approval(
            approval.pk, approvers=["new"], by=operator, reason="old is on leave"
        )

    assert answer["approvers"] == ["new"]
    assert [(c["reason"], [u.username for u in c["deciders"]]) for c in announced] == [
        ("reassigned", ["new"])
    ]
    (entry,) = WorkflowAuditEntry.objects.filter(action="reassign")
    assert (entry.user, entry.reason) == (operator, "old is on leave")
    assert (entry.payload["approvers_before"], entry.payload["approvers_after"]) == (
        ["old"],
        ["new"],
    )
    with pytest.raises(pw.ApprovalForbidden):
        pw.decide_approval(approval.pk, approve=True, by=old)
    pw.decide_approval(approval.pk, approve=True, by=new)
    assert finished(run_id).output["decided_by"] == "new"


def test_reassign__needs_its_permission_else_denied_and_nothing_changes():
    register_gate(approvers=["old"])
    approval = approval_of(start())
    meddler = person("meddler")

    with pytest.raises(pw.ApprovalForbidden, match="reassign_workflowapproval"):
        pw.reassign_approval(approval.pk, approvers=["meddler"], by=meddler)

    approval.refresh_from_db()
    assert approval.approvers == ["old"]
    entry = WorkflowAuditEntry.objects.get()
    assert (entry.action, entry.payload["operation"]) == ("deny", "reassign")


def test_reassign__narrowing_all_to_those_who_approved_settles_it():
    alice = person("alice")
    operator = person("operator", perms=("reassign_workflowapproval",))
    register_gate(approvers=["alice", "bob"], policy="all")
    run_id = start()
    approval = approval_of(run_id)
    pw.decide_approval(approval.pk, approve=True, by=alice)

    answer = pw.reassign_approval(approval.pk, approvers=["alice"], by=operator, reason="bob left")

    assert (answer["status"], answer["decided_by"]) == ("approved", "alice")
    assert finished(run_id).output["approved"] is True


def test_reassign__a_settled_approval_or_bad_approvers_are_refused():
    boss = person("boss")
    operator = person("operator", perms=("reassign_workflowapproval",))
    register_gate()
    approval = approval_of(start())

    with pytest.raises(pw.InvalidInput):
        pw.reassign_approval(approval.pk, approvers="boss", by=operator)
    pw.decide_approval(approval.pk, approve=True, by=boss)
    with pytest.raises(pw.ApprovalResolved):
        pw.reassign_approval(approval.pk, approvers=["boss"], by=operator)


# --- the run around it --------------------------------------------------------------------


def test_suspended_run__a_decision_settles_the_step_and_resuming_continues():
    boss = person("boss")
    register_gate()
    run_id = start()
    pw.suspend_run(run_id, reason="fraud check")

    pw.decide_approval(approval_of(run_id).pk, approve=True, by=boss)

    assert finished(run_id).status == RunStatus.SUSPENDED
    pw.resume_run(run_id)
    assert finished(run_id).output["approved"] is True


def test_cancelled_run__its_pending_approvals_close_and_refuse_decisions():
    boss = person("boss")
    register_gate()
    run_id = start()
    approval = approval_of(run_id)

    pw.cancel_run(run_id, reason="customer called")

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.CANCELLED
    cancel = WorkflowAuditEntry.objects.get(action="cancel")
    assert cancel.payload["cancelled_approvals"] == [str(approval.pk)]
    with pytest.raises(pw.ApprovalResolved, match="cancelled"):
        pw.decide_approval(approval.pk, approve=True, by=boss)
    assert pw.get_run_status(run_id)["waiting_on"] is None


def test_get_approval__the_dict_the_api_answers_with():
    boss = person("boss")
    register_gate(approvers=["boss"], expires_in="1d", summary="Buy a desk")
    run_id = start()
    approval = approval_of(run_id)
    pw.decide_approval(approval.pk, approve=True, by=boss, comment="ok")
    drain_queue()

    answer = pw.get_approval(str(approval.pk))

    assert {
        key: answer[key]
        for key in (
            "id",
            "run_id",
            "step_key",
            "status",
            "approvers",
            "policy",
            "decided_by",
            "comment",
            "data",
        )
    } == {
        "id": str(approval.pk),
        "run_id": run_id,
        "step_key": "gate",
        "status": "approved",
        "approvers": ["boss"],
        "policy": "any",
        "decided_by": "boss",
        "comment": "ok",
        "data": {},
    }
    assert answer["expires_at"] and answer["decided_at"] and answer["summary"] == "Buy a desk"
    assert [d["user"] for d in answer["decisions"]] == ["boss"]
    with pytest.raises(pw.ApprovalNotFound):
        pw.get_approval("00000000-0000-0000-0000-000000000000")
