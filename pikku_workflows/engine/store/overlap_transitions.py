"""A schedule's buffered runs (overlap `buffer_one`, `buffer_all`): queued at their tick while
the schedule's run before is going, and admitted one at a time, in tick order, in the
transaction that ends that run (the schedule's row held: claims)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Exists, Q, QuerySet

from ...dispatch import prompt_orchestration
from ...exceptions import InvalidInput
from ...models import WorkflowRun, WorkflowSchedule
from ...querysets import DatabaseNow
from ...registry import registry
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...waiting import WaitingKind
from .admission_transitions import Admission, admission_for, admit_queued_txn

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
    gets a pass once this transaction commits; a run of a workflow with a concurrency rule
    joins its key's queue instead (`_hand_to_rule`)."""
    assert transaction.get_connection().in_atomic_block
    paused = WorkflowSchedule.objects.filter(pk=schedule_id, paused=True)
    candidate = (
        buffered_runs(schedule_id)
        .exclude(Exists(active_runs(schedule_id)))
        .exclude(Exists(paused))
        .values("pk", "workflow", "input")
        .first()
    )
    if candidate is None:
        return None
    admission = _admission_of(candidate["workflow"], candidate["input"])
    if admission is not None:
        return _hand_to_rule(candidate["pk"], admission)
    moved = WorkflowRun.objects.filter(BUFFERED, pk=candidate["pk"]).update(
        status=RunStatus.RUNNING, waiting_on=WaitingKind.PASS, updated_at=DatabaseNow()
    )
    if not moved:
        return None
    prompt_orchestration(candidate["pk"])
    return str(candidate["pk"])


def _admission_of(workflow: str, input: Any) -> Admission | None:
    """The concurrency rule's admission of a buffered run, None when its workflow (as this
    process knows it) has none or its key function refuses the input."""
    if workflow not in registry.workflows:
        return None
    try:
        return admission_for(workflow, input)
    except InvalidInput:
        return None


def _hand_to_rule(run_id: Any, admission: Admission) -> str | None:
    """Give the buffered run its concurrency key (it stays queued, now in the key's queue, and
    holds the schedule's overlap as its other runs do), and admit the key's queue after this
    commit, in a transaction of its own: the key's lock comes before any run row (the lock order
    of claims.sql), and this one holds a run already. A crash in between leaves it to recovery's
    sweep of queued keys."""
    keyed = WorkflowRun.objects.filter(BUFFERED, pk=run_id).update(
        concurrency_key=admission.key, updated_at=DatabaseNow()
    )
    if not keyed:
        return None
    transaction.on_commit(lambda: _admit_key(admission))
    return str(run_id)


def _admit_key(admission: Admission) -> None:
    with transaction.atomic():
        admit_queued_txn(admission.workflow, admission.key)
