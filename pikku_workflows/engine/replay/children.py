"""Child runs: a `wf.do` whose target is a workflow starts a run and waits on it.

A child's failure fails the parent step's attempt (a retry starts a new child run); the
child's end settles the parent step and resumes the parent. Every message here only prompts:
a refused one is logged, and recovery finds the child or the parent from the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from ...control_flow import RunParked
from ...dispatch import enqueue_orchestration, prompt_orchestration
from ...exceptions import ChildRunCancelled, ChildRunFailed, InvalidTransition, StepSuperseded
from ...models import WorkflowRun, WorkflowStep
from ...observability.tracing import child_traceparent
from ...querysets import database_in
from ...retry import RetryPolicy
from ...serialization import describe_error
from ...status import TERMINAL_RUN_STATUSES, RunStatus, StepStatus
from ..store.claims import lock_running_run_txn
from ..store.run_rows import create_run_row
from ..store.step_transitions import move_step, move_step_txn
from .attempts import record_kept
from .replay_pass import ReplayPass, is_driven_here


def launch_next(rp: ReplayPass, step: WorkflowStep, policy: RetryPolicy) -> WorkflowStep:
    """Start the child run of the step's next attempt (its first from pending; a new one after
    a failed child), park the step on it, and settle it at once if the child already ended."""
    record_kept(rp)
    source = step.status
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        child = create_run_row(
            step.function_name or "",
            step.data,
            inline=rp.inline_caller,
            started_by_id=rp.run.started_by_id,
            parent_run_id=rp.run.pk,
            parent_step_id=step.pk,
            # Under the span of the attempt that starts it: the next one after a failed child.
            traceparent=child_traceparent(
                rp.run, step.step_key, step.attempt + (source == StepStatus.FAILED)
            ),
        )
        moved = move_step_txn(
            step,
            StepStatus.WAITING,
            expected=[source],
            new_attempt=source == StepStatus.FAILED,
            child_run_id=child.pk,
            result=None,
            error=None,
            wake_at=None,
        )
        if not moved:
            raise InvalidTransition(f"step {step.step_key!r}", step.status, StepStatus.WAITING)
        if not rp.inline_caller:
            enqueue_orchestration(child.pk)  # at commit; refused: recovery starts the child
    if rp.inline_caller:
        rp.drive_child(child.pk)
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
        move_step(
            step,
            StepStatus.FAILED,
            expected=[StepStatus.WAITING],
            error=_child_error(step, child),
            wake_at=_retry_timer(step, policy),
        )
    except (InvalidTransition, StepSuperseded):
        # The other path (parent replay or child's end) settled it first: take its record.
        step.refresh_from_db()


def _child_error(step: WorkflowStep, child: Mapping[str, Any]) -> dict[str, Any]:
    failure = ChildRunCancelled if child["status"] == RunStatus.CANCELLED else ChildRunFailed
    message = (child["error"] or {}).get("message", "")
    error = describe_error(
        failure(step.child_run_id, message), step_key=step.step_key, traceback=False
    )
    return {**error, "child_run_id": str(step.child_run_id)}


def _retry_timer(step: WorkflowStep, policy: RetryPolicy) -> Any:
    if step.attempt >= step.attempt_limit:
        return None
    return database_in(policy.backoff_ms(step.attempt) / 1000)


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
    if not is_driven_here(child["parent_run_id"]):
        prompt_orchestration(child["parent_run_id"])
