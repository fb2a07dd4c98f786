"""Who asked for an approval and who may decide it: the requesters along a run's lineage (for
four eyes), a user as the policy reads them, and the users who may still decide."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from ...approvals.policy import (
    DECIDE_PERMISSION,
    GROUP_PREFIX,
    PERM_PREFIX,
    Decider,
    is_username,
    never_decidable,
)
from ...models import WorkflowApproval, WorkflowApprovalDecision, WorkflowAuditEntry, WorkflowRun

# How far back the lineage of forks and parents is followed for four eyes.
LINEAGE_DEPTH = 20


def requesters_of(run: WorkflowRun) -> list[str]:
    """The ids (as text) of the users who asked for this run: whoever started it, forked it or
    retried it, and the same for the runs it was forked from or is a child of."""
    lineage: list[WorkflowRun] = [run]
    while len(lineage) < LINEAGE_DEPTH:
        above = lineage[-1].forked_from_id or lineage[-1].parent_run_id
        found = WorkflowRun.objects.filter(pk=above).first() if above else None
        if found is None:
            break
        lineage.append(found)
    ids = [r.pk for r in lineage]
    users = {r.started_by_id for r in lineage}
    actions = WorkflowAuditEntry.objects.filter(
        Q(run_id__in=ids, action="retry")
        | Q(action="fork", payload__new_run_id__in=[str(pk) for pk in ids])
    )
    users |= set(actions.values_list("user_id", flat=True))
    return sorted(str(user) for user in users if user is not None)


def undecidable(approval: WorkflowApproval, approvers: Iterable[str]) -> str | None:
    """Why no one could ever decide `approval` if these were its approvers (`never_decidable`,
    its requesters kept out under four eyes); None: someone could. One query, and only with
    four eyes and usernames among the approvers."""
    approvers, requesters = list(approvers), list(approval.requesters)
    policy, quorum = approval.policy, approval.quorum
    usernames = [entry for entry in approvers if is_username(entry)]
    if not approval.exclude_requester or not requesters or not usernames:
        return never_decidable(approvers, policy, quorum, excluded=())
    username_field = get_user_model().USERNAME_FIELD
    kept_out = get_user_model()._default_manager.filter(
        pk__in=requesters, **{f"{username_field}__in": usernames}
    )
    excluded = set(kept_out.values_list(username_field, flat=True))
    return never_decidable(approvers, policy, quorum, excluded=excluded)


def decider_for(user: Any) -> Decider:
    """What the policy reads of `user` (their groups and permissions, as the auth backends say)."""
    groups = user.groups.values_list("name", flat=True) if hasattr(user, "groups") else []
    return Decider(
        user_id=str(user.pk),
        username=user.get_username(),
        groups=frozenset(groups),
        permissions=frozenset(user.get_all_permissions()),
        is_superuser=bool(getattr(user, "is_superuser", False)),
        may_decide=user.has_perm(DECIDE_PERMISSION),
    )


def eligible_deciders(approval: WorkflowApproval) -> QuerySet[Any]:
    """The active users who may still decide `approval`: holding the decide permission,
    matching its approvers, not kept out by four eyes, and not having decided it yet."""
    user_model = get_user_model()
    users = _with_permission(DECIDE_PERMISSION)
    if approval.approvers:
        users = users.filter(_matching(approval.approvers))
    if approval.exclude_requester and approval.requesters:
        users = users.exclude(pk__in=approval.requesters)
    decided = WorkflowApprovalDecision.objects.filter(approval=approval).values("user_id")
    return user_model._default_manager.filter(pk__in=users.values("pk")).exclude(pk__in=decided)


def _with_permission(permission: str) -> QuerySet[Any]:
    manager = get_user_model()._default_manager
    with_perm = getattr(manager, "with_perm", None)
    if with_perm is not None:
        try:
            return with_perm(permission, is_active=True, include_superusers=True)
        except (TypeError, ValueError):
            pass  # several auth backends: ask each user instead
    holders = [user.pk for user in manager.all() if user.has_perm(permission)]
    return manager.filter(pk__in=holders)


def _matching(approvers: Iterable[str]) -> Q:
    username_field = get_user_model().USERNAME_FIELD
    names, groups, permissions = [], [], []
    for entry in approvers:
        if entry.startswith(GROUP_PREFIX):
            groups.append(entry[len(GROUP_PREFIX) :])
        elif entry.startswith(PERM_PREFIX):
            permissions.append(entry[len(PERM_PREFIX) :])
        else:
            names.append(entry)
    matching = Q(**{f"{username_field}__in": names}) | Q(groups__name__in=groups)
    for permission in permissions:
        matching |= Q(pk__in=_with_permission(permission).values("pk"))
    return matching
