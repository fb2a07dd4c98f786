"""An approval's life in the tables: opened with its waiting step, settled once (by decisions,
by its deadline, or closed with its run), escalated, reminded; and the Django signals that
announce each change after its commit (who may decide it: `approval_deciders`).

Every settlement is judged under the approval's row lock (`claims.lock_approval_txn`) and
written by one guarded move (`approval_transitions.move_approval_txn`): whoever comes second finds it
settled. Deadlines are the recorded `expires_at`, judged on the database clock.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import Error as DatabaseError
from django.db import transaction
from django.db.models import F
from django.dispatch import Signal

from ...approvals.policy import (
    ApprovalRequest,
    OnExpire,
    Vote,
    approval_id_for,
    outcome_result,
)
from ...approvals.signals import approval_expired, approval_reminder, approval_requested
from ...exceptions import ApprovalExpired, InvalidInput, InvalidTransition
from ...models import (
    WorkflowApproval,
    WorkflowApprovalDecision,
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
)
from ...querysets import DatabaseNow, database_in
from ...serialization import describe_error
from ...status import ApprovalStatus, StepStatus
from .approval_deciders import eligible_deciders, requesters_of, undecidable
from .approval_transitions import move_approval_txn
from .claims import deadline_passed, lock_approval_txn, lock_due_reminders_txn
from .step_transitions import move_step_txn

logger = logging.getLogger(__name__)


def open_approval_txn(
    run: WorkflowRun, step: WorkflowStep, request: ApprovalRequest
) -> WorkflowApproval:
    """Inside the transaction that parked `step` (waiting, its `wake_at` the deadline on the
    database clock): the approval of the step's attempt, announced after the commit."""
    assert transaction.get_connection().in_atomic_block
    approval = WorkflowApproval(
        id=approval_id_for(step.pk, step.attempt),
        run_id=run.pk,
        step=step,
        attempt=step.attempt,
        approvers=list(request.approvers),
        policy=request.policy,
        quorum=request.quorum,
        exclude_requester=request.exclude_requester,
        requesters=requesters_of(run),
        expires_in_ms=request.expires_in_ms,
        # The step's timer is the deadline: one clock reading, recorded once.
        expires_at=step.wake_at,
        on_expire=request.on_expire,
        escalate_to=list(request.escalate_to),
        remind_every_ms=request.remind_every_ms,
        form=request.form,
        summary=request.summary,
        request_data=request.data,
    )
    _refuse_undecidable(approval)
    if request.remind_every_ms:
        approval.remind_at = database_in(request.remind_every_ms / 1000)
    approval.save(force_insert=True)
    if request.remind_every_ms:
        approval.refresh_from_db(fields=["remind_at"])
    announce(approval_requested, approval, reason="requested")
    return approval


def _refuse_undecidable(approval: WorkflowApproval) -> None:
    """InvalidInput when no one could ever decide the approval, or its escalation (four eyes
    and approvers who all requested the run): it would wait for nobody."""
    escalation = approval.escalate_to if approval.on_expire == OnExpire.ESCALATE else []
    for entries in (approval.approvers, escalation):
        why = undecidable(approval, entries)
        if why is not None:
            raise InvalidInput(f"wf.approval: nobody could ever decide this approval: {why}.")


def votes_of(approval: WorkflowApproval) -> list[Vote]:
    decisions = WorkflowApprovalDecision.objects.filter(approval=approval).order_by(
        "created_at", "id"
    )
    return [
        Vote(str(d.user_id), d.approve, tuple(d.matched))
        for d in decisions.only("user_id", "approve", "matched")
    ]


def decision_list(approval: WorkflowApproval) -> list[dict[str, Any]]:
    """Every decision as the outcome lists it (`decision_dict`)."""
    decisions = WorkflowApprovalDecision.objects.filter(approval=approval).order_by(
        "created_at", "id"
    )
    return [decision_dict(decision) for decision in decisions]


def decision_dict(decision: WorkflowApprovalDecision) -> dict[str, Any]:
    """One decision as outcomes and reads show it: `{user, approve, comment, data, at}`."""
    return {
        "user": decision.username,
        "approve": decision.approve,
        "comment": decision.comment,
        "data": decision.data,
        "at": decision.created_at.isoformat(),
    }


# --- settling ------------------------------------------------------------------------------


def settle_by_decisions_txn(
    approval: WorkflowApproval, target: str, decision: WorkflowApprovalDecision
) -> bool:
    """Inside the approval's lock: settle it `approved` or `rejected` by `decision` (the one
    that decided), and record the outcome as its step's result. False (nothing written) when
    the deadline passed by the database clock before this write."""
    settled = move_approval_txn(
        approval,
        target,
        expected=[ApprovalStatus.PENDING],
        before_deadline=True,
        decided_by_id=decision.user_id,
        decided_at=DatabaseNow(),
        comment=decision.comment,
        data=decision.data,
        remind_at=None,
    )
    if not settled:
        return False
    outcome = outcome_result(
        approval_id=approval.pk,
        status=target,
        approved=target == ApprovalStatus.APPROVED,
        decided_by=decision.username,
        decided_at=approval.decided_at,
        comment=decision.comment,
        data=decision.data,
        decisions=decision_list(approval),
    )
    _finish_step_txn(approval, StepStatus.SUCCEEDED, result=outcome)
    return True


def record_expiry_txn(approval: WorkflowApproval) -> str:
    """Inside the approval's lock, its deadline passed: apply `on_expire`. Returns what
    happened: "escalated" (still pending, with new approvers and deadline) or the status it
    settled as ("expired")."""
    if approval.on_expire == OnExpire.ESCALATE and approval.escalated_at is None:
        _escalate_txn(approval)
        return "escalated"
    # A deadline is the decision: judged from the recorded time, never from when we got here.
    expired = move_approval_txn(
        approval,
        ApprovalStatus.EXPIRED,
        expected=[ApprovalStatus.PENDING],
        decided_at=approval.expires_at,
        remind_at=None,
    )
    if not expired:
        raise InvalidTransition(f"approval {approval.pk}", approval.status, ApprovalStatus.EXPIRED)
    approved = approval.on_expire == OnExpire.APPROVE
    outcome = outcome_result(
        approval_id=approval.pk,
        status=ApprovalStatus.EXPIRED,
        approved=approved,
        decided_by=None,
        decided_at=approval.expires_at,
        decisions=decision_list(approval),
    )
    if approval.on_expire == OnExpire.FAIL:
        error = describe_error(
            ApprovalExpired(approval.step.step_key, approval.pk),
            step_key=approval.step.step_key,
            traceback=False,
        )
        _finish_step_txn(
            approval, StepStatus.FAILED, error=error, attempt_limit=approval.step.attempt
        )
    else:
        _finish_step_txn(approval, StepStatus.SUCCEEDED, result=outcome)
    announce(approval_expired, approval, outcome=outcome)
    return ApprovalStatus.EXPIRED


def _escalate_txn(approval: WorkflowApproval) -> None:
    """The approvers become `escalate_to` with a new deadline of the same length, counted from
    the recorded one (a late timer does not lengthen it); audited `escalate`."""
    before = list(approval.approvers)
    assert approval.expires_at is not None and approval.expires_in_ms
    deadline = approval.expires_at + timedelta(milliseconds=approval.expires_in_ms)
    WorkflowApproval.objects.filter(pk=approval.pk).update(
        approvers=approval.escalate_to,
        expires_at=deadline,
        escalated_at=DatabaseNow(),
        updated_at=DatabaseNow(),
    )
    WorkflowStep.objects.filter(pk=approval.step_id, status=StepStatus.WAITING).update(
        wake_at=deadline, updated_at=DatabaseNow()
    )
    approval.refresh_from_db()
    WorkflowAuditEntry.objects.create(
        run_id=approval.run_id,
        step_id=approval.step_id,
        action="escalate",
        reason="Nobody decided before the deadline; escalated to " + ", ".join(approval.approvers),
        payload={
            "approval_id": str(approval.pk),
            "approvers_before": before,
            "approvers_after": list(approval.approvers),
            "expires_at": deadline.isoformat(),
        },
    )
    announce(approval_requested, approval, reason="escalated")


def _finish_step_txn(approval: WorkflowApproval, target: str, **fields: Any) -> None:
    step = approval.step
    if "result" in fields:
        # A graph's approval node branches on its outcome ("approved", "rejected", "expired").
        fields["branch_taken"] = fields["result"]["status"]
    moved = move_step_txn(step, target, expected=[StepStatus.WAITING], wake_at=None, **fields)
    if not moved:
        # The step is not waiting on this attempt: the approval cannot settle it (roll back).
        raise InvalidTransition(f"step {step.step_key!r}", step.status, target)


def close_approval_txn(approval: WorkflowApproval) -> None:
    """Inside the approval's lock: its run ended while it was pending; nobody may decide it."""
    move_approval_txn(
        approval, ApprovalStatus.CANCELLED, expected=[ApprovalStatus.PENDING], remind_at=None
    )


# --- the timer loop ------------------------------------------------------------------------


def fire_approval_timer_txn(step: WorkflowStep) -> bool:
    """Inside the timer loop's transaction, which holds the due approval step: apply its
    deadline. True when the step settled (a pass should run); False when the approval is still
    pending (escalated) or the timer was stale."""
    approval = lock_approval_txn(approval_id_for(step.pk, step.attempt))
    if approval is None or not approval.is_pending or not deadline_passed(approval):
        # Nothing to judge now: leave the step as it is, re-armed at the recorded deadline.
        wake_at = approval.expires_at if approval is not None and approval.is_pending else None
        WorkflowStep.objects.filter(pk=step.pk).update(wake_at=wake_at, updated_at=DatabaseNow())
        return False
    return record_expiry_txn(approval) != "escalated"


def send_due_reminders(limit: int) -> int:
    """Send `approval_reminder` for pending approvals whose reminder is due; returns how many."""
    with transaction.atomic():
        due = lock_due_reminders_txn(limit)
        for approval in due:
            assert approval.remind_every_ms
            WorkflowApproval.objects.filter(pk=approval.pk).update(
                remind_at=database_in(approval.remind_every_ms / 1000),
                reminders_sent=F("reminders_sent") + 1,
                updated_at=DatabaseNow(),
            )
            approval.refresh_from_db(fields=["remind_at", "reminders_sent"])
            announce(approval_reminder, approval)
    return len(due)


# --- announcing ----------------------------------------------------------------------------


def announce(signal: Signal, approval: WorkflowApproval, **extra: Any) -> None:
    """Send `signal` about `approval` once the current transaction commits (never if it rolls
    back); a receiver's error is logged, never raised into the engine."""
    transaction.on_commit(partial(_send, signal, approval, extra))


def _send(signal: Signal, approval: WorkflowApproval, extra: dict[str, Any]) -> None:
    if not signal.has_listeners(WorkflowApproval):
        return  # nobody listens: no need to ask who may decide
    try:
        deciders = list(eligible_deciders(approval)) if approval.is_pending else []
        responses = signal.send_robust(
            sender=WorkflowApproval, approval=approval, deciders=deciders, **extra
        )
    except DatabaseError:
        logger.exception("pikku_workflows: could not announce approval %s", approval.pk)
        return
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "pikku_workflows: receiver %r of an approval signal failed for approval %s",
                receiver,
                approval.pk,
                exc_info=response,
            )
