"""What callers may ask of approvals and signals, bounded (docs/security-and-limits.md): at most
MAX_APPROVERS approvers, at most MAX_KEPT_SIGNALS signals a run keeps untaken, and no approval
that nobody could ever decide (four eyes whose approvers all requested the run, a quorum the
listed users cannot reach), refused with a clear error that writes nothing."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowAuditEntry, WorkflowRun, WorkflowSignal
from pikku_workflows.status import RunStatus
from tests.approvals import approval_of, finished, person, register_gate, start

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def operator():
    return person("operator", perms=("reassign_workflowapproval",))


# --- MAX_APPROVERS -------------------------------------------------------------------------


def test_reassign__ten_thousand_approvers_are_refused_and_nothing_changes(operator):
    register_gate(approvers=["boss"])
    approval = approval_of(start())

    with pytest.raises(
        pw.InvalidInput, match=r"at most 100 approvers \(MAX_APPROVERS\), not 10000"
    ):
        pw.reassign_approval(approval.pk, approvers=[f"u{i}" for i in range(10_000)], by=operator)

    approval.refresh_from_db()
    assert approval.approvers == ["boss"]
    assert not WorkflowAuditEntry.objects.filter(action="reassign").exists()


def test_reassign__max_approvers_is_a_setting(operator):
    register_gate(approvers=["boss"])
    approval = approval_of(start())

    with override_settings(PIKKU_WORKFLOWS={"MAX_APPROVERS": 2}):
        pw.reassign_approval(approval.pk, approvers=["a", "b"], by=operator)
        with pytest.raises(pw.InvalidInput, match="MAX_APPROVERS"):
            pw.reassign_approval(approval.pk, approvers=["a", "b", "c"], by=operator)

    approval.refresh_from_db()
    assert approval.approvers == ["a", "b"]


def test_request__more_approvers_than_the_cap_fail_the_run_with_invalid_input():
    register_gate(approvers=[f"u{i}" for i in range(101)])

    run = WorkflowRun.objects.get(pk=start())

    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT" and "MAX_APPROVERS" in run.error["message"]
    assert not WorkflowApproval.objects.exists()


# --- approvals nobody could ever decide ----------------------------------------------------


def test_reassign__four_eyes_to_only_the_requester_is_refused(operator):
    starter = person("starter")
    register_gate(approvers=["boss"], exclude_requester=True)
    approval = approval_of(start(by=starter))

    with pytest.raises(pw.InvalidInput, match=r"Nobody could ever decide .*\['starter'\]"):
        pw.reassign_approval(approval.pk, approvers=["starter"], by=operator)

    approval.refresh_from_db()
    assert approval.approvers == ["boss"]
    assert not WorkflowAuditEntry.objects.filter(action="reassign").exists()


def test_reassign__four_eyes_all_policy_refuses_any_requester_among_the_approvers(operator):
    starter = person("starter")
    register_gate(approvers=["boss", "cfo"], policy="all", exclude_requester=True)
    approval = approval_of(start(by=starter))

    with pytest.raises(pw.InvalidInput, match="policy 'all' needs"):
        pw.reassign_approval(approval.pk, approvers=["boss", "starter"], by=operator)


def test_reassign__a_quorum_the_listed_users_cannot_reach_is_refused(operator):
    starter = person("starter")
    register_gate(approvers=["a", "b", "c"], policy="quorum", quorum=2, exclude_requester=True)
    approval = approval_of(start(by=starter))

    with pytest.raises(pw.InvalidInput, match="quorum 2 can never be reached"):
        pw.reassign_approval(approval.pk, approvers=["a", "starter"], by=operator)
    with pytest.raises(pw.InvalidInput, match="quorum 2 can never be reached by 1 listed users"):
        pw.reassign_approval(approval.pk, approvers=["a"], by=operator)


def test_reassign__groups_permissions_and_others_beside_the_requester_are_accepted(operator):
    # A group or a permission can gain members; someone besides the requester may decide.
    starter = person("starter")
    register_gate(approvers=["boss"], exclude_requester=True)
    approval = approval_of(start(by=starter))

    for approvers in (["group:nobody-yet"], ["perm:auth.view_user"], ["starter", "deputy"], []):
        answer = pw.reassign_approval(approval.pk, approvers=approvers, by=operator)
        assert answer["approvers"] == approvers


def test_reassign__without_four_eyes_the_requester_may_be_the_approver(operator):
    starter = person("starter")
    register_gate(approvers=["boss"])
    run_id = start(by=starter)

    pw.reassign_approval(approval_of(run_id).pk, approvers=["starter"], by=operator)
    pw.decide_approval(approval_of(run_id).pk, approve=True, by=starter)

    assert finished(run_id).status == RunStatus.COMPLETED


def test_request__four_eyes_with_only_the_requester_fails_the_run_and_opens_nothing():
    starter = person("starter")
    register_gate(approvers=["starter"], exclude_requester=True)

    run = WorkflowRun.objects.get(pk=start(by=starter))

    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert "nobody could ever decide" in run.error["message"]
    assert not WorkflowApproval.objects.exists()


def test_request__an_escalation_to_only_the_requester_is_refused_too():
    starter = person("starter")
    register_gate(
        approvers=["boss"],
        exclude_requester=True,
        expires_in="1h",
        on_expire="escalate",
        escalate_to=["starter"],
    )

    run = WorkflowRun.objects.get(pk=start(by=starter))

    assert run.status == RunStatus.FAILED and "nobody could ever decide" in run.error["message"]


# --- MAX_KEPT_SIGNALS ----------------------------------------------------------------------


@pytest.fixture
def never_waits() -> str:
    @pw.workflow("bounds.never_waits")
    def never_waits(wf, input):
        return wf.wait_for_signal("go", "go")

    return "bounds.never_waits"


def test_send_signal__one_more_than_max_kept_signals_is_refused(never_waits):
    run_id = pw.start_workflow(never_waits, None, inline=True)

    with override_settings(PIKKU_WORKFLOWS={"MAX_KEPT_SIGNALS": 3}):
        for number in range(3):
            pw.send_signal(run_id, "noise", {"n": number})
        with pytest.raises(pw.InvalidTransition, match=r"keeps 3 signals .*MAX_KEPT_SIGNALS"):
            pw.send_signal(run_id, "noise", {"n": 3})
        # A signal a wait takes at once is not kept: the full run still takes it.
        pw.send_signal(run_id, "go", "now")

    assert WorkflowSignal.objects.filter(run_id=run_id, name="noise").count() == 3
    assert WorkflowAuditEntry.objects.filter(action="signal").count() == 4
    assert finished(run_id).output == "now"
