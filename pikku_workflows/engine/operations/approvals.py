"""Deciding and reassigning approvals (`pw.decide_approval`, `pw.reassign_approval`), for the
admin, the HTTP API and code alike; each returns the approval as a dict.

A decision is one `WorkflowApprovalDecision` per person plus an `approve`/`reject` audit row;
when the policy settles the approval its outcome becomes the step's result and the run's pass
is enqueued after the commit. Refusals change nothing but their own record: deciding a settled
approval is `ApprovalResolved` (409); a person the policy does not allow gets
`ApprovalForbidden` (403), audited as `deny`; invalid data is `InvalidInput` and nothing is
written. Everything is judged under the approval's row lock and the deadline on the database
clock, in the write that settles it: concurrent deciders settle an approval exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ...approvals.forms import decision_data
from ...approvals.policy import (
    REASSIGN_PERMISSION,
    ApprovalPolicy,
    Decider,
    checked_approvers,
    matched_entries,
    refusal,
    settle,
)
from ...approvals.signals import approval_decided, approval_requested
from ...dispatch import enqueue_orchestration
from ...exceptions import (
    ApprovalForbidden,
    ApprovalNotFound,
    ApprovalResolved,
    InvalidInput,
    WorkflowError,
)
from ...models import WorkflowApproval, WorkflowApprovalDecision, WorkflowAuditEntry
from ...querysets import DatabaseNow
from ...status import ApprovalStatus
from ...validation import REASON_MAX_LENGTH, checked_text
from ..store.approval_deciders import decider_for, eligible_deciders, undecidable
from ..store.approval_rows import (
    announce,
    close_approval_txn,
    record_expiry_txn,
    settle_by_decisions_txn,
    votes_of,
)
from ..store.claims import deadline_passed, lock_approval_txn
from .approval_reads import approval_dict, approval_pk
from .users import checked_user

# A decision whose deadline passes between its judgement and its write is judged once more.
DECISION_TRIES = 3


class _DeadlinePassed(Exception):
    """Rolls back a decision whose deadline passed (by the database clock) between its
    judgement and its write; the next judgement records the expiry instead."""


@dataclass
class _Verdict:
    """What a locked judgement decided: the approval as it now stands, and the refusal to raise
    once the transaction (with whatever it recorded: an expiry, a `deny`) has committed."""

    approval: WorkflowApproval
    refused: WorkflowError | None = None


def decide_approval(
    approval_id: Any, *, approve: bool, by: Any, comment: str = "", data: Any = None
) -> dict[str, Any]:
    """Record `by`'s decision (`approve` True or False) with a comment and data (validated by the
    approval's form, or any JSON object without one); returns the approval."""
    pk = approval_pk(approval_id)
    if not isinstance(approve, bool):
        raise InvalidInput(f"approve must be True or False, not {approve!r}.")
    user = _decider_user(by)
    checked_text(comment, "The comment", max_length=REASON_MAX_LENGTH, allow_empty=True)
    decider = decider_for(user)
    approval = WorkflowApproval.objects.filter(pk=pk).first()
    if approval is None:
        raise ApprovalNotFound(approval_id)
    cleaned = None
    if approval.is_pending and _allowed(approval, decider) is None:
        # Outside any lock: the form is user code. The judgement under the lock follows.
        cleaned = decision_data(approval.form, data)

    def judge_txn(approval: WorkflowApproval) -> _Verdict:
        return _record_decision_txn(approval, user, decider, approve, comment, data, cleaned)

    return approval_dict(_judged(pk, judge_txn))


def reassign_approval(
    approval_id: Any, *, approvers: Any, by: Any, reason: str = ""
) -> dict[str, Any]:
    """Give a pending approval new approvers (usernames, `group:`, `perm:`), audited
    `reassign`; `by` needs `pikku_workflows.reassign_workflowapproval`. Returns the approval."""
    pk = approval_pk(approval_id)
    entries = checked_approvers(approvers)
    user = _decider_user(by)
    checked_text(reason, "The reason", max_length=REASON_MAX_LENGTH, allow_empty=True)

    def judge_txn(approval: WorkflowApproval) -> _Verdict:
        if not user.has_perm(REASSIGN_PERMISSION):
            why = f"{user.get_username()} lacks the permission {REASSIGN_PERMISSION}"
            _audit(approval, "deny", user, why, operation="reassign", approvers=list(entries))
            return _Verdict(approval, ApprovalForbidden(why, approval_id=approval.pk, reason=why))
        if approval.policy == ApprovalPolicy.ALL and not entries:
            return _Verdict(approval, InvalidInput("policy 'all' needs approvers."))
        undecided = undecidable(approval, entries)
        if undecided is not None:
            message = f"Nobody could ever decide approval {approval.pk}: {undecided}."
            return _Verdict(approval, InvalidInput(message))
        _reassign_txn(approval, list(entries), user, reason)
        return _Verdict(approval)

    return approval_dict(_judged(pk, judge_txn))


def _decider_user(by: Any) -> Any:
    user = checked_user(by, "by")
    if user is None:
        raise InvalidInput("by must be the user who decides (a saved user), not None.")
    return user


def _allowed(approval: WorkflowApproval, decider: Decider) -> str | None:
    return refusal(
        decider,
        approval.approvers,
        exclude_requester=approval.exclude_requester,
        requesters=approval.requesters,
    )


def _judged(pk: Any, judge_txn: Callable[[WorkflowApproval], _Verdict]) -> WorkflowApproval:
    """Lock the approval, settle what time and the run already settled (an ended run closes it,
    a passed deadline expires or escalates it), then let `judge_txn` act on a pending one; raise
    its refusal after the commit, so that what the judgement recorded stays recorded."""
    for _ in range(DECISION_TRIES):
        try:
            with transaction.atomic():
                approval = lock_approval_txn(pk)
                if approval is None:
                    raise ApprovalNotFound(pk)
                verdict = _settle_overdue_txn(approval) or judge_txn(approval)
        except _DeadlinePassed:
            continue
        if verdict.refused is not None:
            raise verdict.refused
        return verdict.approval
    raise ApprovalResolved(
        f"Approval {pk} reached its deadline while it was being decided.", approval_id=pk
    )


def _settle_overdue_txn(approval: WorkflowApproval) -> _Verdict | None:
    """A refusal when the approval is settled, or became so here; None: it is pending."""
    if approval.is_pending and approval.run.is_settled:
        close_approval_txn(approval)
    # No timer fired yet (or it is late): the deadline is as good as recorded. An escalation
    # keeps it pending, with its new approvers.
    overdue = approval.is_pending and deadline_passed(approval)
    if overdue and record_expiry_txn(approval) != "escalated":
        enqueue_orchestration(approval.run_id)  # after the commit
    if approval.is_pending:
        return None
    message = f"Approval {approval.pk} was already settled: {approval.status}."
    return _Verdict(
        approval, ApprovalResolved(message, approval_id=approval.pk, status=approval.status)
    )


def _record_decision_txn(
    approval: WorkflowApproval,
    user: Any,
    decider: Decider,
    approve: bool,
    comment: str,
    data: Any,
    cleaned: dict[str, Any] | None,
) -> _Verdict:
    if WorkflowApprovalDecision.objects.filter(approval=approval, user=user).exists():
        message = f"{decider.username} already decided approval {approval.pk}."
        return _Verdict(
            approval, ApprovalResolved(message, approval_id=approval.pk, status=approval.status)
        )
    why = _allowed(approval, decider)
    if why is not None:
        _audit(approval, "deny", user, why, decision="approve" if approve else "reject")
        return _Verdict(approval, ApprovalForbidden(why, approval_id=approval.pk, reason=why))
    if cleaned is None:
        # Allowed only now (an escalation named them): check the data here, keeping the expiry.
        try:
            cleaned = decision_data(approval.form, data)
        except InvalidInput as exc:
            return _Verdict(approval, exc)
    decision = WorkflowApprovalDecision.objects.create(
        approval=approval,
        user=user,
        username=decider.username,
        approve=approve,
        comment=comment,
        data=cleaned,
        matched=list(matched_entries(decider, approval.approvers)),
        created_at=DatabaseNow(),
    )
    decision.refresh_from_db(fields=["created_at"])
    target = _settled_status(approval, approve)
    _audit(approval, "approve" if approve else "reject", user, comment, approval_status=target)
    if target == ApprovalStatus.PENDING:
        if not _still_before_deadline_txn(approval):
            raise _DeadlinePassed
    elif settle_by_decisions_txn(approval, target, decision):
        enqueue_orchestration(approval.run_id)  # after the commit
        announce(approval_decided, approval, outcome=approval.step.result, decision=decision)
    else:
        raise _DeadlinePassed
    return _Verdict(approval)


def _settled_status(approval: WorkflowApproval, approve: bool) -> str:
    undecided = None
    if approval.policy == ApprovalPolicy.QUORUM and not approve:
        # Whether the quorum can still be reached depends on who is left to decide.
        undecided = eligible_deciders(approval).count()
    return settle(
        approval.policy,
        approval.approvers,
        approval.quorum,
        votes_of(approval),
        undecided_deciders=undecided,
    )


def _still_before_deadline_txn(approval: WorkflowApproval) -> bool:
    """The guarded write of a decision that leaves the approval pending: it counts only if it
    lands before the deadline by the database clock."""
    pending = WorkflowApproval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING)
    if approval.expires_at is not None:
        pending = pending.filter(expires_at__gt=DatabaseNow())
    return bool(pending.update(updated_at=DatabaseNow()))


def _reassign_txn(approval: WorkflowApproval, entries: list[str], user: Any, reason: str) -> None:
    before = list(approval.approvers)
    WorkflowApproval.objects.filter(pk=approval.pk).update(
        approvers=entries, updated_at=DatabaseNow()
    )
    approval.approvers = entries
    _audit(approval, "reassign", user, reason, approvers_before=before, approvers_after=entries)
    # The new approvers may already be covered by the approvals recorded (an `all` narrowed).
    decisions = WorkflowApprovalDecision.objects.filter(approval=approval).order_by(
        "created_at", "id"
    )
    target = settle(approval.policy, entries, approval.quorum, votes_of(approval))
    last = decisions.last()
    if (
        target == ApprovalStatus.APPROVED
        and last is not None
        and settle_by_decisions_txn(approval, target, last)
    ):
        enqueue_orchestration(approval.run_id)
        announce(approval_decided, approval, outcome=approval.step.result, decision=last)
        return
    announce(approval_requested, approval, reason="reassigned")


def _audit(approval: WorkflowApproval, action: str, user: Any, reason: str, **payload: Any) -> None:
    WorkflowAuditEntry.objects.create(
        run_id=approval.run_id,
        step_id=approval.step_id,
        action=action,
        user=user,
        reason=reason,
        payload={"approval_id": str(approval.pk), **payload},
    )
