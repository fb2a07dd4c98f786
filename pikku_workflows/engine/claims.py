"""Every row lock the engine takes: a worker's claim of one step, the timer loop's batch claim.

Locks live only as long as the short transaction that claims; user code runs after the commit.
Leases and due times are judged on the database clock.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from ..conf import pikku_settings
from ..models import WorkflowStep, WorkflowStepHistory
from ..querysets import DatabaseNow
from ..status import RunStatus, StepStatus
from . import fast_path
from .transitions import move_step_txn

# How long the claim of one known step waits for another transaction's row lock.
STEP_LOCK_TIMEOUT = "5s"

STEP_LEASE_EXPIRED = "STEP_LEASE_EXPIRED"


def step_lease_from_now() -> Any:
    return DatabaseNow() + timedelta(seconds=pikku_settings.STEP_LEASE_SECONDS)


def claim_step(run_id: Any, step_key: str) -> tuple[WorkflowStep | None, bool]:
    """Claim a queued step for this worker: (the step now running under our attempt, or None;
    whether the claim ended the step as exhausted, so the orchestrator must look at it)."""
    with transaction.atomic():
        step = _lock_step_txn(run_id, step_key)
        if step is None:
            return None, False
        return _claim_locked_txn(step)


def claim_fresh_step(
    run_id: Any, step_key: str, runnable: Collection[str]
) -> tuple[WorkflowStep | None, str | None]:
    """The common claim, one statement on PostgreSQL: a pending or scheduled step whose function
    is in `runnable` (this worker has it) → running under a fresh lease. (The step or None,
    the run's started_by username.) None: `claim_step` and its checks decide what else to do.
    """
    if connection.vendor != "postgresql":
        return None, None
    step = fast_path.claim_fresh_step(
        run_id,
        step_key,
        [StepStatus.PENDING, StepStatus.SCHEDULED],
        list(runnable),
        pikku_settings.STEP_LEASE_SECONDS,
        timezone.now(),
    )
    if step is None:
        return None, None
    if not step.history_found:  # type: ignore[attr-defined]
        # A crash between two writes in an older version left no row for this attempt.
        WorkflowStepHistory.objects.create(
            step_id=step.pk, attempt=step.attempt, status=StepStatus.RUNNING, running_at=Now()
        )
    return step, step.started_by_name  # type: ignore[attr-defined]


def _lock_step_txn(run_id: Any, step_key: str) -> WorkflowStep | None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # Wait briefly rather than skip: skipping a locked row could drop the only message.
            cursor.execute(f"SET LOCAL lock_timeout = '{STEP_LOCK_TIMEOUT}'")
    return (
        WorkflowStep.objects.select_for_update(of=("self",))
        .select_related("run__started_by")
        # A cancelled or suspended run starts nothing new.
        .filter(run_id=run_id, step_key=step_key, run__status=RunStatus.RUNNING)
        .annotate(
            lease_lapsed=ExpressionWrapper(
                Q(lease_expires_at__lt=DatabaseNow()), output_field=BooleanField()
            ),
            retry_due=ExpressionWrapper(
                Q(wake_at__isnull=True) | Q(wake_at__lte=DatabaseNow()),
                output_field=BooleanField(),
            ),
        )
        .first()
    )


def _claim_locked_txn(step: Any) -> tuple[WorkflowStep | None, bool]:
    status = step.status
    lapsed = status == StepStatus.RUNNING and step.lease_lapsed
    fresh = {"lease_expires_at": step_lease_from_now(), "wake_at": None}
    if status in (StepStatus.PENDING, StepStatus.SCHEDULED):
        move_step_txn(step, StepStatus.RUNNING, expected=[status], **fresh)
        return step, False
    if step.attempt >= step.attempt_limit:
        if lapsed:
            _fail_lease_expired_txn(step)
        return None, lapsed
    if lapsed or (status == StepStatus.FAILED and step.retry_due):
        # The new attempt fences the previous worker in the same write that grants our lease.
        move_step_txn(
            step,
            StepStatus.RUNNING,
            expected=[status],
            new_attempt=True,
            result=None,
            error=None,
            **fresh,
        )
        return step, False
    return None, False


def _fail_lease_expired_txn(step: WorkflowStep) -> None:
    error = {
        "code": STEP_LEASE_EXPIRED,
        "message": f"Step {step.step_key!r} lost its worker on its last attempt "
        f"({step.attempt} of {step.attempt_limit}).",
        "type": "pikku_workflows.StepLeaseExpired",
        "step_key": step.step_key,
    }
    move_step_txn(
        step, StepStatus.FAILED, expected=[StepStatus.RUNNING], error=error, lease_expires_at=None
    )


def claim_due_timers(limit: int) -> list[WorkflowStep]:
    """Take due timer rows (sleeps, retry backoffs) of running runs, skipping rows others hold.

    A due sleep is completed here; a due retry only loses its `wake_at` (it stays failed with
    attempts left, which the pass or the step worker turns into a new attempt).
    """
    with transaction.atomic():
        due = list(
            WorkflowStep.objects.due()
            .filter(run__status=RunStatus.RUNNING)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("wake_at")[:limit]
        )
        for step in due:
            if step.status == StepStatus.SCHEDULED:
                move_step_txn(
                    step, StepStatus.SUCCEEDED, expected=[step.status], result=None, wake_at=None
                )
            else:
                WorkflowStep.objects.filter(pk=step.pk).update(wake_at=None, updated_at=Now())
    return due
