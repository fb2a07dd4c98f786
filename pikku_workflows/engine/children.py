"""Child runs: a `wf.do` whose target is a workflow starts a run and waits on it.

A child's failure fails the parent step's attempt (a retry starts a new child run); the
child's end settles the parent step and resumes the parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..dispatch import enqueue_orchestration
from ..exceptions import InvalidTransition, RunParked, StepSuperseded
from ..models import WorkflowRun, WorkflowStep
from ..retry import RetryPolicy
from ..status import TERMINAL_RUN_STATUSES, RunStatus, StepStatus
from . import driving
from .replay import ReplayPass
from .runs import create_run_row
from .transitions import lock_running_run_txn, move_step, move_step_txn


def start_child(rp: ReplayPass, step: WorkflowStep, policy: RetryPolicy) -> WorkflowStep:
    return _launch(rp, step, policy, StepStatus.PENDING, new_attempt=False)


def retry_child(rp: ReplayPass, step: WorkflowStep, policy: RetryPolicy) -> WorkflowStep:
    return _launch(rp, step, policy, StepStatus.FAILED, new_attempt=True)


def _launch(
    rp: ReplayPass, step: WorkflowStep, policy: RetryPolicy, source: str, *, new_attempt: bool
) -> WorkflowStep:
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        child = create_run_row(
            step.function_name or "",
            step.data,
            inline=rp.inline_caller,
            started_by_id=rp.run.started_by_id,
            parent_run_id=rp.run.pk,
            parent_step_id=step.pk,
        )
        moved = move_step_txn(
            step,
            StepStatus.WAITING,
            expected=[source],
            new_attempt=new_attempt,
            child_run_id=child.pk,
            result=None,
            error=None,
            wake_at=None,
        )
        if not moved:
            raise InvalidTransition(f"step {step.step_key!r}", step.status, StepStatus.WAITING)
    if rp.inline_caller:
        from .orchestrator import orchestrate

        orchestrate(child.pk, inline_caller=True)
    else:
        enqueue_orchestration(child.pk)
    return settle_waiting_step(rp, step, policy)


def settle_waiting_step(rp: ReplayPass, step: WorkflowStep, policy: RetryPolicy) -> WorkflowStep:
    """Apply the child's outcome if it ended (also heals a crash before the parent was told)."""
    if step.child_run_id is None:
        raise RunParked(step.step_key)
    child = (
        WorkflowRun.objects.filter(pk=step.child_run_id).values("status", "output", "error").first()
    )
    if child is None or child["status"] not in TERMINAL_RUN_STATUSES:
        raise RunParked(step.step_key)
    apply_child_outcome(step, child, policy)
    return step


def apply_child_outcome(step: WorkflowStep, child: Mapping[str, Any], policy: RetryPolicy) -> None:
    try:
        if child["status"] == RunStatus.COMPLETED:
            move_step(
                step, StepStatus.SUCCEEDED, expected=[StepStatus.WAITING], result=child["output"]
            )
            return
        child_error = child["error"] or {}
        error = {
            "code": "CHILD_RUN_FAILED"
            if child["status"] == RunStatus.FAILED
            else "CHILD_RUN_CANCELLED",
            "message": f"Child run {step.child_run_id} {child['status']}: {child_error.get('message', '')}",
            "type": "pikku_workflows.ChildRun",
            "child_run_id": str(step.child_run_id),
            "step_key": step.step_key,
        }
        wake_at = None
        if step.attempt < step.attempt_limit:
            wake_at = timezone.now() + timedelta(milliseconds=policy.backoff_ms(step.attempt))
        move_step(
            step, StepStatus.FAILED, expected=[StepStatus.WAITING], error=error, wake_at=wake_at
        )
    except (InvalidTransition, StepSuperseded):
        # The other path (parent replay or child's end) settled it first: take its record.
        step.refresh_from_db()


def notify_parent(run_id: Any) -> None:
    """Called when a child run ends: settle the parent's waiting step and resume the parent."""
    child = (
        WorkflowRun.objects.filter(pk=run_id)
        .values("status", "output", "error", "parent_run_id", "parent_step_id")
        .first()
    )
    if child is None or child["parent_step_id"] is None:
        return
    step = WorkflowStep.objects.filter(
        pk=child["parent_step_id"], child_run_id=run_id, status=StepStatus.WAITING
    ).first()
    if step is not None:
        apply_child_outcome(step, child, RetryPolicy.from_stored(step.retries, step.retry_delay))
    if not driving.is_driven_here(child["parent_run_id"]):
        enqueue_orchestration(child["parent_run_id"])
