"""An approval's status changes: settled once under its guard (and its deadline, on the database
clock), or cancelled with its run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Q

from ...models import WorkflowApproval
from ...querysets import DatabaseNow
from ...status import ApprovalStatus, approval_sources
from .claims import lock_pending_approvals_txn
from .transitions import checked_sources


def move_approval_txn(
    approval: WorkflowApproval,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    before_deadline: bool = False,
    **fields: Any,
) -> bool:
    """Inside a transaction: settle `approval` as `target` if its status is one of `expected`
    (default: every legal source, i.e. pending), and with `before_deadline` only while its
    deadline has not passed by the database clock at this write (a decision wins only if it is
    recorded before the deadline). False, with nothing written, when the guard refuses.
    Expression values (the database clock) are read back into `approval`."""
    assert transaction.get_connection().in_atomic_block
    sources = checked_sources("approval", target, approval_sources(target), expected)
    guarded = WorkflowApproval.objects.filter(pk=approval.pk, status__in=sources)
    if before_deadline:
        guarded = guarded.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=DatabaseNow()))
    if not guarded.update(status=target, updated_at=DatabaseNow(), **fields):
        return False
    approval.status = target
    computed = [name for name, value in fields.items() if hasattr(value, "resolve_expression")]
    for name, value in fields.items():
        if name not in computed:
            setattr(approval, name, value)
    if computed:
        approval.refresh_from_db(fields=computed)
    return True


def cancel_pending_approvals_txn(run_id: Any) -> list[str]:
    """Inside a transaction: close the run's pending approvals as cancelled (the run is being
    cancelled: nobody may decide them now); returns their ids."""
    assert transaction.get_connection().in_atomic_block
    ids = lock_pending_approvals_txn(run_id)
    WorkflowApproval.objects.filter(pk__in=ids).update(
        status=ApprovalStatus.CANCELLED, remind_at=None, updated_at=DatabaseNow()
    )
    return [str(pk) for pk in ids]
