"""Firing due timers: sleeps end, retry backoffs end, approval deadlines and signal timeouts
pass, reminders are sent; the work they wait for is dispatched. And moving timers earlier, for
tests that skip time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration, enqueue_step
from ...exceptions import WorkflowDispatchException
from ...models import WorkflowApproval, WorkflowStep
from ...outages import outages
from ...querysets import DatabaseNow
from ...registry import registry
from ...status import ApprovalStatus, StepKind, StepStatus
from ..store.admission_transitions import admit_due
from ..store.approval_rows import fire_approval_timer_txn, send_due_reminders
from ..store.claims import lock_due_timers_txn
from ..store.limit_slots import free_lapsed_slots
from ..store.signal_rows import time_out_wait_txn
from ..store.step_transitions import move_step_txn


def fire_due_timers(limit: int | None = None) -> int:
    """One tick of the timer loop; returns how many timers fired (reminders, queued runs
    admitted because the time a rate gave them came, and limits' slots freed because their
    lease lapsed, included)."""
    batch = limit or pikku_settings.RECOVERY_BATCH
    due = claim_due_timers(batch)
    for step in due:
        try:
            dispatch_woken(step.run_id, step.step_key, step.function_name)
        except WorkflowDispatchException as exc:
            # The row says what is due; recovery relays it once the queue is back.
            outages.failed(f"dispatching woken step {step.step_key!r}", exc)
    return len(due) + send_due_reminders(batch) + admit_due(batch) + free_lapsed_slots(batch)


def claim_due_timers(limit: int) -> list[WorkflowStep]:
    """Take due timer rows (sleeps, retry backoffs, approval deadlines, signal timeouts) of
    running runs, skipping rows others hold; returns those whose run should now take a pass.

    A due sleep is completed here; a due retry, or a step a rate held, only loses its `wake_at`
    (it stays failed with attempts left, or pending: the pass or the step worker turns it into
    a new attempt); a due approval
    or signal wait is settled by its deadline (an escalated approval waits on, for no pass).
    """
    with transaction.atomic():
        due = lock_due_timers_txn(limit)
        woken = []
        for step in due:
            if step.status == StepStatus.SCHEDULED and step.kind == StepKind.SLEEP:
                move_step_txn(
                    step, StepStatus.SUCCEEDED, expected=[step.status], result=None, wake_at=None
                )
            elif step.status == StepStatus.WAITING and step.kind in WAIT_DEADLINES:
                if not WAIT_DEADLINES[step.kind](step):
                    continue
            else:
                WorkflowStep.objects.filter(pk=step.pk).update(
                    wake_at=None, updated_at=DatabaseNow()
                )
            woken.append(step)
    return woken


# What a waiting step's timer means, by kind: each settles the step if it is still waiting
# (True: it did) inside the timer loop's transaction.
WAIT_DEADLINES: dict[str, Callable[[WorkflowStep], bool]] = {
    StepKind.APPROVAL: fire_approval_timer_txn,
    StepKind.SIGNAL: time_out_wait_txn,
}


def dispatch_woken(run_id: Any, step_key: str, function_name: str | None) -> None:
    """A queued step function goes to a step worker; anything else resumes the run's pass."""
    definition = registry.step_functions.get(function_name or "")
    if definition is not None and not definition.inline:
        enqueue_step(run_id, step_key, definition.queue)
    else:
        enqueue_orchestration(run_id)


def shift_timers(run_ids: list[Any] | None, earlier_by: timedelta) -> int:
    """Move the armed timers (sleeps, retry backoffs, approval deadlines and reminders, signal
    timeouts, the times rates gave held steps) of `run_ids` (None: every run) earlier by
    `earlier_by`, in one UPDATE: the time skipping of `pikku_workflows.testing.drain(advance=)`.
    The timer loop then fires those that are due as it would once that much time had passed."""
    armed = WorkflowStep.objects.filter(wake_at__isnull=False)
    deadlines = WorkflowApproval.objects.filter(status=ApprovalStatus.PENDING)
    if run_ids is not None:
        armed = armed.filter(run_id__in=run_ids)
        deadlines = deadlines.filter(run_id__in=run_ids)
    # An approval's deadline is its recorded `expires_at` (the step's timer only arms it).
    deadlines.filter(expires_at__isnull=False).update(expires_at=F("expires_at") - earlier_by)
    deadlines.filter(remind_at__isnull=False).update(remind_at=F("remind_at") - earlier_by)
    # A step a rate held is due when its `not_before` is: both move.
    return armed.update(
        wake_at=F("wake_at") - earlier_by,
        not_before=F("not_before") - earlier_by,
        updated_at=DatabaseNow(),
    )
