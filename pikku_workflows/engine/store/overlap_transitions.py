"""A schedule's buffered runs (overlap `buffer_one`, `buffer_all`): queued at their tick while
the schedule's run before is going, and admitted one at a time, in tick order, in the
transaction that ends that run (the schedule's row held: claims)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Exists, Q, QuerySet

from ...dispatch import prompt_orchestration
from ...models import WorkflowRun, WorkflowSchedule
from ...querysets import DatabaseNow
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...waiting import WaitingKind

# A run its schedule holds back: queued with neither a concurrency key (a rule's queue) nor a
# not_before (a rate's wait).
BUFFERED = Q(status=RunStatus.QUEUED, concurrency_key__isnull=True, not_before__isnull=True)


def buffered_runs(schedule_id: Any) -> QuerySet[WorkflowRun]:
    """The schedule's buffered runs, in tick order (the order they are admitted in)."""
    runs = WorkflowRun.objects.filter(BUFFERED, schedule_id=schedule_id)
    return runs.order_by("scheduled_for", "created_at", "id")


def active_runs(schedule_id: Any) -> QuerySet[WorkflowRun]:
    """The schedule's runs that hold its overlap: not ended, and not buffered themselves."""
    runs = WorkflowRun.objects.filter(schedule_id=schedule_id).exclude(BUFFERED)
    return runs.exclude(status__in=TERMINAL_RUN_STATUSES)


def admit_buffered_txn(schedule_id: Any) -> str | None:
    """Inside a transaction holding the schedule's row: admit its oldest buffered run unless
    one of its runs is active or it is paused (resuming admits it); its id, or None. The run
    gets a pass once this transaction commits."""
    assert transaction.get_connection().in_atomic_block
    paused = WorkflowSchedule.objects.filter(pk=schedule_id, paused=True)
    candidate = (
        buffered_runs(schedule_id)
        .exclude(Exists(active_runs(schedule_id)))
        .exclude(Exists(paused))
        .values_list("pk", flat=True)
        .first()
    )
    if candidate is None:
        return None
    moved = WorkflowRun.objects.filter(BUFFERED, pk=candidate).update(
        status=RunStatus.RUNNING, waiting_on=WaitingKind.PASS, updated_at=DatabaseNow()
    )
    if not moved:
        return None
    prompt_orchestration(candidate)
    return str(candidate)
