"""Who may decide an approval and how many must agree, through `pw.decide_approval` against a
real run: any, all, quorum; approvers by username, group and permission; four eyes (the
starter, whoever retried or forked); forbidden deciders (audited `deny`, nothing else changes)
and double decisions."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import (
    WorkflowApproval,
    WorkflowApprovalDecision,
    WorkflowAuditEntry,
    WorkflowStep,
)
from pikku_workflows.status import ApprovalStatus, RunStatus, StepStatus
from tests.approvals import approval_of, finished, past_deadline, person, register_gate, start

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def decide(approval: WorkflowApproval, user, approve: bool = True, **options) -> dict:
    return pw.decide_approval(approval.pk, approve=approve, by=user, **options)


def unchanged(approval: WorkflowApproval) -> None:
    """Still pending, its step still waiting, its run not prompted (nothing queued)."""
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert WorkflowStep.objects.get(pk=approval.step_id).status == StepStatus.WAITING


def audit_actions(run_id) -> list[tuple[str, str | None]]:
    entries = WorkflowAuditEntry.objects.filter(run_id=run_id).select_related("user")
    return [(e.action, e.user.username if e.user else None) for e in entries]


# --- any ----------------------------------------------------------------------------------


@pytest.mark.parametrize("approve", [True, False])
def test_any__the_first_decision_decides(approve):
    boss = person("boss")
    register_gate(approvers=["boss"])
    run_id = start()
    approval = approval_of(run_id)

    answer = decide(approval, boss, approve, comment="checked the invoice", data={"ref": 7})

    status = "approved" if approve else "rejected"
    assert (answer["status"], answer["decided_by"], answer["comment"]) == (
        status,
        "boss",
        "checked the invoice",
    )
    run = finished(run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.output == {
        "status": status,
        "approved": approve,
        "decided_by": "boss",
        "comment": "checked the invoice",
        "data": {"ref": 7},
        "users": ["boss"],
    }
    assert audit_actions(run_id) == [("approve" if approve else "reject", "boss")]


@pytest.mark.parametrize(
    ("entry", "allowed", "refused"),
    [
        ("alice", "alice", "bob"),
        ("group:managers", "bob", "alice"),
        ("perm:demo.view_order", "carol", "alice"),
    ],
)
def test_any__approvers_are_usernames_groups_or_permissions(entry, allowed, refused):
    people = {
        "alice": person("alice"),
        "bob": person("bob", "managers"),
        "carol": person("carol", perms=("view_order",)),
    }
    register_gate(approvers=[entry])
    run_id = start()
    approval = approval_of(run_id)

    with pytest.raises(pw.ApprovalForbidden, match="not among the approvers"):
        decide(approval, people[refused])
    unchanged(approval)
    decide(approval, people[allowed])

    assert finished(run_id).output["decided_by"] == allowed


def test_any__without_approvers_anyone_holding_the_permission_decides(django_user_model):
    register_gate()
    run_id = start()
    approval = approval_of(run_id)
    outsider = person("outsider", decide=False)
    root = django_user_model.objects.create_superuser("root")

    with pytest.raises(pw.ApprovalForbidden, match="decide_workflowapproval"):
        decide(approval, outsider)
    decide(approval, root)

    assert finished(run_id).output["decided_by"] == "root"


# --- all ----------------------------------------------------------------------------------


def test_all__every_listed_user_and_one_member_per_group_must_approve():
    alice, bob, carol = person("alice"), person("bob", "finance"), person("carol", "finance")
    register_gate(approvers=["alice", "group:finance"], policy="all")
    run_id = start()
    approval = approval_of(run_id)

    assert decide(approval, bob)["status"] == "pending"
    # Another finance member adds nothing: the group already has its approval.
    assert decide(approval, carol)["status"] == "pending"
    assert finished(run_id).status == RunStatus.RUNNING
    answer = decide(approval, alice, comment="last one")

    assert answer["status"] == "approved" and answer["decided_by"] == "alice"
    output = finished(run_id).output
    assert (output["status"], output["decided_by"]) == ("approved", "alice")
    assert output["users"] == ["bob", "carol", "alice"]


def test_all__any_rejection_rejects_at_once():
    alice, bob = person("alice"), person("bob")
    register_gate(approvers=["alice", "bob", "carol"], policy="all")
    run_id = start()
    approval = approval_of(run_id)

    decide(approval, alice)
    answer = decide(approval, bob, approve=False, comment="over budget")

    assert answer["status"] == "rejected"
    output = finished(run_id).output
    assert (output["approved"], output["decided_by"], output["comment"]) == (
        False,
        "bob",
        "over budget",
    )


def test_all__one_person_in_two_listed_groups_covers_only_one():
    both = person("both", "legal", "finance")
    legal = person("lawyer", "legal")
    register_gate(approvers=["group:legal", "group:finance"], policy="all")
    run_id = start()
    approval = approval_of(run_id)

    assert decide(approval, both)["status"] == "pending"  # four eyes across the groups
    assert decide(approval, legal)["status"] == "approved"  # both takes finance, lawyer legal


# --- quorum -------------------------------------------------------------------------------


def test_quorum__n_approvals_approve():
    people = [person(name, "board") for name in ("ann", "ben", "cal", "dee")]
    register_gate(approvers=["group:board"], policy="quorum", quorum=3)
    run_id = start()
    approval = approval_of(run_id)

    assert decide(approval, people[0])["status"] == "pending"
    assert decide(approval, people[1], approve=False)["status"] == "pending"
    assert decide(approval, people[2])["status"] == "pending"
    assert decide(approval, people[3])["status"] == "approved"

    output = finished(run_id).output
    assert (output["status"], output["decided_by"], output["users"]) == (
        "approved",
        "dee",
        ["ann", "ben", "cal", "dee"],
    )


def test_quorum__rejected_once_the_quorum_can_no_longer_be_reached():
    people = [person(name, "board") for name in ("ann", "ben", "cal", "dee")]
    person("idle", "board", decide=False)  # in the group, may not decide: not counted
    register_gate(approvers=["group:board"], policy="quorum", quorum=3)
    run_id = start()
    approval = approval_of(run_id)

    assert decide(approval, people[0], approve=False)["status"] == "pending"  # 0 + 3 left
    answer = decide(approval, people[1], approve=False)  # 0 + 2 left < 3

    assert answer["status"] == "rejected"
    assert finished(run_id).output["approved"] is False
    with pytest.raises(pw.ApprovalResolved):
        decide(approval, people[2])


# --- four eyes ----------------------------------------------------------------------------


def test_four_eyes__whoever_started_the_run_may_not_decide():
    clerk, manager = person("clerk", "managers"), person("manager", "managers")
    register_gate(approvers=["group:managers"], exclude_requester=True)
    run_id = start(by=clerk)
    approval = approval_of(run_id)

    with pytest.raises(pw.ApprovalForbidden, match="four eyes") as caught:
        decide(approval, clerk, comment="my own order")

    assert caught.value.code == "APPROVAL_FORBIDDEN"
    unchanged(approval)
    assert not WorkflowApprovalDecision.objects.exists()
    (deny,) = WorkflowAuditEntry.objects.filter(run_id=run_id)
    assert (deny.action, deny.user, deny.payload["decision"]) == ("deny", clerk, "approve")
    assert "four eyes" in deny.reason
    decide(approval, manager)
    assert finished(run_id).output["decided_by"] == "manager"


def test_four_eyes__whoever_retried_the_run_may_not_decide_its_new_approval():
    starter, retrier, other = person("starter"), person("retrier"), person("other")
    register_gate(exclude_requester=True, expires_in="1h", on_expire="fail")
    run_id = start(by=starter)
    past_deadline(approval_of(run_id))
    pw.recover()  # the timer loop: the deadline fails the run
    assert finished(run_id).status == RunStatus.FAILED
    pw.retry_run(run_id, by=retrier)
    finished(run_id)
    second = approval_of(run_id, attempt=2)

    assert set(second.requesters) == {str(starter.pk), str(retrier.pk)}
    for kept_out in (starter, retrier):
        with pytest.raises(pw.ApprovalForbidden, match="four eyes"):
            decide(second, kept_out)
    decide(second, other)
    assert finished(run_id).status == RunStatus.COMPLETED


def test_four_eyes__whoever_forked_the_run_may_not_decide_the_fork():
    starter, forker, other = person("starter"), person("forker"), person("other")

    @pw.workflow("approvals.forked")
    def forked(wf, input):
        wf.do("prepare", lambda: "ready")
        return wf.approval("gate", exclude_requester=True).approved

    run_id = start("approvals.forked", by=starter)
    pw.cancel_run(run_id)
    fork_id = pw.fork_run(run_id, from_step="gate", by=forker)
    finished(fork_id)
    approval = approval_of(fork_id)

    assert set(approval.requesters) == {str(starter.pk), str(forker.pk)}
    for kept_out in (starter, forker):
        with pytest.raises(pw.ApprovalForbidden, match="four eyes"):
            decide(approval, kept_out)
    decide(approval, other)
    assert finished(fork_id).output is True


# --- refusals -----------------------------------------------------------------------------


def test_forbidden__is_audited_deny_and_changes_nothing_else():
    register_gate(approvers=["boss"])
    run_id = start()
    approval = approval_of(run_id)
    intern = person("intern", decide=False)
    before = WorkflowApproval.objects.values().get(pk=approval.pk)

    with pytest.raises(pw.ApprovalForbidden) as caught:
        decide(approval, intern, approve=False, comment="no", data={"x": 1})

    assert caught.value.approval_id == approval.pk
    assert WorkflowApproval.objects.values().get(pk=approval.pk) == before
    assert not WorkflowApprovalDecision.objects.exists()
    assert audit_actions(run_id) == [("deny", "intern")]
    assert finished(run_id).status == RunStatus.RUNNING


def test_double_decision__the_same_person_twice_is_resolved():
    ann, ben = person("ann", "board"), person("ben", "board")
    person("cal", "board")
    register_gate(approvers=["group:board"], policy="quorum", quorum=2)
    run_id = start()
    approval = approval_of(run_id)
    decide(approval, ann)

    with pytest.raises(pw.ApprovalResolved, match="already decided") as caught:
        decide(approval, ann, approve=False)

    assert caught.value.code == "APPROVAL_RESOLVED"
    assert list(WorkflowApprovalDecision.objects.values_list("user__username", "approve")) == [
        ("ann", True)
    ]
    assert decide(approval, ben)["status"] == "approved"
    with pytest.raises(pw.ApprovalResolved) as after:
        decide(approval, ben)
    assert after.value.status == "approved"


def test_decided__a_settled_approval_refuses_every_later_decision_409():
    boss, deputy = person("boss"), person("deputy")
    register_gate(approvers=["boss", "deputy"])
    run_id = start()
    approval = approval_of(run_id)
    decide(approval, boss)

    with pytest.raises(pw.ApprovalResolved) as caught:
        decide(approval, deputy, approve=False)

    assert caught.value.status == "approved"
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, boss)
    assert WorkflowApprovalDecision.objects.count() == 1


def test_decide__checks_its_arguments_before_anything():
    register_gate()
    approval = approval_of(start())
    boss = person("boss")

    with pytest.raises(pw.ApprovalNotFound):
        pw.decide_approval("not-a-uuid", approve=True, by=boss)
    with pytest.raises(pw.ApprovalNotFound):
        pw.decide_approval("00000000-0000-0000-0000-000000000000", approve=True, by=boss)
    with pytest.raises(pw.InvalidInput, match="approve must be"):
        pw.decide_approval(approval.pk, approve="yes", by=boss)
    with pytest.raises(pw.InvalidInput, match="by must be"):
        pw.decide_approval(approval.pk, approve=True, by=None)
    with pytest.raises(pw.InvalidInput, match="comment"):
        pw.decide_approval(approval.pk, approve=True, by=boss, comment="x" * 3000)
    with pytest.raises(pw.InvalidInput, match="JSON object"):
        pw.decide_approval(approval.pk, approve=True, by=boss, data=[1, 2])
    unchanged(approval)
    assert not WorkflowAuditEntry.objects.exists()
