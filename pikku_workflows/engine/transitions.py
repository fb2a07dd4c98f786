"""Every status change of runs and steps: one guarded UPDATE (plus the step's history row) per move.

A guard that matches no row is an illegal move (`InvalidTransition`), a stale attempt
(`StepSuperseded`) or a run that stopped being ours (`RunInterrupted`); nothing is written then.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..exceptions import InvalidTransition, RunInterrupted, StepSuperseded
from ..models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from ..querysets import DatabaseNow
from ..status import TERMINAL_RUN_STATUSES, RunStatus, StepStatus, run_sources, step_sources
from . import fast_path

HISTORY_TIMESTAMP: dict[str, str] = {
    StepStatus.PENDING: "created_at",
    StepStatus.SCHEDULED: "scheduled_at",
    StepStatus.RUNNING: "running_at",
    StepStatus.WAITING: "waiting_at",
    StepStatus.SUCCEEDED: "succeeded_at",
    StepStatus.FAILED: "failed_at",
}


def _checked_sources(
    what: str, target: str, allowed: frozenset[str], expected: Iterable[str] | None
):
    sources = frozenset(expected) if expected is not None else allowed
    illegal = sources - allowed
    if illegal:
        raise InvalidTransition(what, sorted(illegal)[0], target)
    return sources


def move_run(
    run_id: Any,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    lease_holder: str | None = None,
    **fields: Any,
) -> None:
    """Move a run to `target` if its status is one of `expected` (default: every legal source).

    With `lease_holder`, the move also requires that holder to own the run lease.
    """
    sources = _checked_sources("run", target, run_sources(target), expected)
    runs = WorkflowRun.objects.filter(pk=run_id, status__in=sources)
    if lease_holder is not None:
        runs = runs.filter(lease_holder=lease_holder)
    if target in TERMINAL_RUN_STATUSES:
        fields.setdefault("finished_at", DatabaseNow())
    elif target == RunStatus.RUNNING:
        fields.setdefault("finished_at", None)
    if runs.update(status=target, updated_at=DatabaseNow(), **fields):
        return
    current = WorkflowRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if lease_holder is not None and current in sources:
        raise RunInterrupted(f"run {run_id} lease is no longer held by this pass")
    raise InvalidTransition("run", current, target)


def lock_running_run_txn(run_id: Any, lease_holder: str) -> None:
    """Inside a transaction: prove the run is still running under this pass, and keep it so.

    The row lock (FOR NO KEY UPDATE, which a cancel or suspend also needs) lasts until the short
    transaction commits: a cancelled or suspended run starts nothing new. It writes nothing, so
    a step costs the run row no new version; the heartbeat renews the lease.
    """
    assert transaction.get_connection().in_atomic_block
    runs = WorkflowRun.objects.select_for_update(no_key=True, of=("self",)).filter(
        pk=run_id, status=RunStatus.RUNNING, lease_holder=lease_holder
    )
    if not runs.values_list("pk", flat=True)[:1]:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")


def create_step_in_run(
    run_id: Any, lease_holder: str, step_key: str, *, status: str, **fields: Any
) -> WorkflowStep:
    """Insert a step with its first history row into a run this pass holds: one commit.

    On PostgreSQL it is one statement (guard, step, history); elsewhere one short transaction.
    """
    if _fast_path_available():
        step, history = _new_step_rows(run_id, step_key, status, fields)
        if not fast_path.insert_step_guarded(
            run_id, lease_holder, step, history, stamp_first_attempt
        ):
            raise RunInterrupted(f"run {run_id} is no longer running under this pass")
        return step
    with transaction.atomic():
        lock_running_run_txn(run_id, lease_holder)
        return create_step_txn(run_id, step_key, status=status, **fields)


def create_step_txn(
    run_id: Any,
    step_key: str,
    *,
    status: str = StepStatus.PENDING,
    **fields: Any,
) -> WorkflowStep:
    """Inside a transaction: insert a step with its first history row (attempt 1).

    A step created straight into `running` keeps its `pending` moment as the history row's
    created_at, so the timeline still shows both.
    """
    assert transaction.get_connection().in_atomic_block
    step, history = _new_step_rows(run_id, step_key, status, fields)
    step.save(force_insert=True)
    stamp_first_attempt(history, step)
    history.save(force_insert=True)
    return step


def _new_step_rows(
    run_id: Any, step_key: str, status: str, fields: dict[str, Any]
) -> tuple[WorkflowStep, WorkflowStepHistory]:
    step = WorkflowStep(id=uuid.uuid4(), run_id=run_id, step_key=step_key, status=status, **fields)
    history = WorkflowStepHistory(
        step=step,
        attempt=step.attempt,
        status=status,
        result=fields.get("result"),
        error=fields.get("error"),
    )
    return step, history


def stamp_first_attempt(history: WorkflowStepHistory, step: WorkflowStep) -> None:
    """Give attempt 1's history row the moment the (just saved) step was created."""
    history.created_at = step.created_at
    if history.status != StepStatus.PENDING:
        setattr(history, HISTORY_TIMESTAMP[history.status], step.created_at)


def _fast_path_available() -> bool:
    return transaction.get_connection().vendor == "postgresql"


def move_step(
    step: WorkflowStep,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    new_attempt: bool = False,
    **fields: Any,
) -> None:
    """Move `step` (as last read, fenced by its attempt) to `target`, with its history row.

    `new_attempt` advances the attempt in the same guarded write, fencing out the previous
    attempt's worker. `step` is updated in memory on success.
    """
    if _fast_path_available() and not new_attempt and fast_path.plain(fields):
        # One statement is its own transaction: no BEGIN/COMMIT round trips around it.
        moved = _move_step_fast(step, target, expected, fields)
    else:
        with transaction.atomic():
            moved = move_step_txn(
                step, target, expected=expected, new_attempt=new_attempt, **fields
            )
    if not moved:
        _raise_refused(step, target)


def move_step_txn(
    step: WorkflowStep,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    new_attempt: bool = False,
    **fields: Any,
) -> bool:
    """Inside a transaction: `move_step` without raising; False (nothing written) when refused."""
    assert transaction.get_connection().in_atomic_block
    allowed = step_sources(target)
    if not new_attempt:
        # running -> running is only a re-claim (a new attempt); as a plain move it would let
        # two claimers of the same attempt both win (the second re-reads `running` and matches).
        allowed -= {target}
    sources = _checked_sources("step", target, allowed, expected)
    guarded = WorkflowStep.objects.filter(pk=step.pk, attempt=step.attempt, status__in=sources)
    changes = {"status": target, "updated_at": DatabaseNow(), **fields}
    if new_attempt:
        changes["attempt"] = F("attempt") + 1
    if not guarded.update(**changes):
        return False
    history_values: dict[str, Any] = {k: fields[k] for k in ("result", "error") if k in fields}
    if new_attempt:
        history = WorkflowStepHistory(step_id=step.pk, attempt=step.attempt + 1, status=target)
        for key, value in history_values.items():
            setattr(history, key, value)
        if target != StepStatus.PENDING:
            setattr(history, HISTORY_TIMESTAMP[target], timezone.now())
        history.save(force_insert=True)
        # Only now: if the insert fails the transaction rolls back, and `step` must still match.
        step.attempt = history.attempt
    else:
        _record_history(step, target, history_values)
    step.status = target
    for key, value in fields.items():
        if not hasattr(value, "resolve_expression"):
            setattr(step, key, value)
    return True


def _move_step_fast(
    step: WorkflowStep, target: str, expected: Iterable[str] | None, fields: dict[str, Any]
) -> bool:
    sources = _checked_sources("step", target, step_sources(target) - {target}, expected)
    history_values: dict[str, Any] = {k: fields[k] for k in ("result", "error") if k in fields}
    history_values["status"] = target
    history_values[HISTORY_TIMESTAMP[target]] = timezone.now()
    moved, history_found = fast_path.update_step_fenced(
        step, sources, {"status": target, **fields}, history_values
    )
    if not moved:
        return False
    if not history_found:
        with transaction.atomic():
            _record_history(
                step, target, {k: fields[k] for k in ("result", "error") if k in fields}
            )
    step.status = target
    for key, value in fields.items():
        setattr(step, key, value)
    return True


def _record_history(step: WorkflowStep, target: str, values: dict[str, Any]) -> None:
    # History times come from the application clock, like the rows' created_at.
    changes = {"status": target, HISTORY_TIMESTAMP[target]: timezone.now(), **values}
    if target == StepStatus.PENDING:
        del changes["created_at"]
    if not WorkflowStepHistory.objects.filter(step_id=step.pk, attempt=step.attempt).update(
        **changes
    ):
        # A crash between two writes in an older version left no row for this attempt: repair it.
        WorkflowStepHistory.objects.create(step_id=step.pk, attempt=step.attempt, **changes)


def _raise_refused(step: WorkflowStep, target: str) -> None:
    current = WorkflowStep.objects.filter(pk=step.pk).values("status", "attempt").first()
    if current is None:
        raise InvalidTransition("step", None, target)
    if current["attempt"] != step.attempt:
        raise StepSuperseded(step.step_key, step.attempt)
    raise InvalidTransition(f"step {step.step_key!r}", current["status"], target)
