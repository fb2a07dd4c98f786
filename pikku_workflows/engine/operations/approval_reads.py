"""What approvals look like from outside, read only: one approval as a dict (the API's
approval), and the approvals a user may decide now (the inbox's "assigned to me", its count
on the admin index) or may see."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Q, QuerySet

from ...approvals.policy import refusal
from ...exceptions import ApprovalNotFound
from ...models import WorkflowApproval, WorkflowApprovalDecision
from ..store.approval_deciders import decider_for
from ..store.approval_rows import decision_dict

VIEW_RUN_PERMISSION = "pikku_workflows.view_workflowrun"
VIEW_APPROVAL_PERMISSION = "pikku_workflows.view_workflowapproval"


def approval_pk(approval_id: Any) -> uuid.UUID:
    """The approval id as a UUID; a malformed one names no approval (ApprovalNotFound)."""
    if isinstance(approval_id, uuid.UUID):
        return approval_id
    try:
        return uuid.UUID(str(approval_id))
    except ValueError:
        raise ApprovalNotFound(approval_id) from None


def get_approval(approval_id: Any) -> dict[str, Any]:
    approval = (
        WorkflowApproval.objects.select_related("run", "step", "decided_by")
        .filter(pk=approval_pk(approval_id))
        .first()
    )
    if approval is None:
        raise ApprovalNotFound(approval_id)
    return approval_dict(approval)


def approval_dict(approval: WorkflowApproval) -> dict[str, Any]:
    """`{id, run_id, step_key, status, approvers, policy, expires_at, decided_by, decided_at,
    comment, data}` (docs/http-api.md), with the request, the options and every decision.

    The decisions are read as `approval.decisions` (ordered by time, then id): a list of
    approvals that prefetched them builds every dict without a query per approval."""
    decisions = approval.decisions.all()
    return {
        "id": str(approval.pk),
        "run_id": str(approval.run_id),
        "workflow": approval.run.workflow,
        "step_key": approval.step.step_key,
        "attempt": approval.attempt,
        "status": approval.status,
        "summary": approval.summary,
        "request_data": approval.request_data,
        "approvers": list(approval.approvers),
        "policy": approval.policy,
        "quorum": approval.quorum,
        "exclude_requester": approval.exclude_requester,
        "form": approval.form or None,
        "created_at": approval.created_at.isoformat(),
        "expires_at": _iso(approval.expires_at),
        "on_expire": approval.on_expire,
        "escalate_to": list(approval.escalate_to),
        "escalated_at": _iso(approval.escalated_at),
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "decided_at": _iso(approval.decided_at),
        "comment": approval.comment,
        "data": approval.data,
        "decisions": [decision_dict(decision) for decision in decisions],
    }


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None


def decidable_by(
    user: Any, approvals: QuerySet[WorkflowApproval] | None = None
) -> QuerySet[WorkflowApproval]:
    """Those of `approvals` (default: all) that `user` may decide now: pending, of a live run,
    and `user` holds the decide permission, matches the approvers, is not kept out by four eyes
    and has not decided yet. Judged in Python per pending approval (approvers are groups and
    permissions, not columns), then applied to `approvals` as a filter."""
    approvals = approvals if approvals is not None else WorkflowApproval.objects.all()
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return approvals.none()
    decider = decider_for(user)
    if not decider.may_decide:
        return approvals.none()
    decided = WorkflowApprovalDecision.objects.filter(user=user).values("approval_id")
    candidates = (
        WorkflowApproval.objects.pending()
        .exclude(pk__in=decided)
        .values_list("pk", "approvers", "exclude_requester", "requesters")
    )
    mine = [
        pk
        for pk, approvers, exclude_requester, requesters in candidates
        if refusal(decider, approvers, exclude_requester=exclude_requester, requesters=requesters)
        is None
    ]
    return approvals.filter(pk__in=mine)


def visible_to(
    user: Any, approvals: QuerySet[WorkflowApproval] | None = None
) -> QuerySet[WorkflowApproval]:
    """The approvals `user` may see: every one with the view permission of approvals or runs;
    otherwise those of runs they started and those they may decide or have decided."""
    approvals = approvals if approvals is not None else WorkflowApproval.objects.all()
    if user.has_perm(VIEW_APPROVAL_PERMISSION) or user.has_perm(VIEW_RUN_PERMISSION):
        return approvals
    mine = decidable_by(user, approvals).values("pk")
    decided = WorkflowApprovalDecision.objects.filter(user=user).values("approval_id")
    return approvals.filter(Q(pk__in=mine) | Q(pk__in=decided) | Q(run__started_by=user))
