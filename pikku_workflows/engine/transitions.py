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

from ..conf import pikku_settings
from ..dispatch import QueueMessage
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

    With `lease_holder`, the move also requires that holder to own the run lease; a move to a
    terminal status then releases the lease in the same write (a settled run is never
    orchestrated again, so a pending rerun request is moot).
    """
    sources = _checked_sources("run", target, run_sources(target), expected)
    runs = WorkflowRun.objects.filter(pk=run_id, status__in=sources)
    if lease_holder is not None:
        runs = runs.filter(lease_holder=lease_holder)
    if target in TERMINAL_RUN_STATUSES:
        fields.setdefault("finished_at", DatabaseNow())
        if lease_holder is not None:
            fields.update(lease_holder=None, lease_expires_at=None, rerun_requested=False)
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
    if fast_path_available():
        step, history = _new_step_rows(run_id, step_key, status, fields)
        if not fast_path.insert_step_guarded(
            run_id, lease_holder, step, history, stamp_first_attempt
        ):
            raise RunInterrupted(f"run {run_id} is no longer running under this pass")
        return step
    with transaction.atomic():
        lock_running_run_txn(run_id, lease_holder)
        return create_step_txn(run_id, step_key, status=status, **fields)


def create_dispatched_step(
    run_id: Any, lease_holder: str, step_key: str, message: QueueMessage, **fields: Any
) -> tuple[WorkflowStep, bool]:
    """Insert a step straight into `scheduled` with its queue message, and release the run lease:
    one statement, so the message never names a step that was not written, and a worker that
    finishes the step at once finds the lease free. PostgreSQL only (`fast_path_available`).

    Returns the step and whether the lease was released (False: a rerun was requested, the
    caller still holds it and must release it as usual).
    """
    step, history = _new_step_rows(run_id, step_key, StepStatus.SCHEDULED, fields)
    released = fast_path.insert_dispatched_step(
        run_id, lease_holder, step, history, stamp_first_attempt, message
    )
    if released is None:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")
    return step, released


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


def fast_path_available() -> bool:
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
    if fast_path_available() and not new_attempt and fast_path.plain(fields):
        # One statement is its own transaction: no BEGIN/COMMIT round trips around it.
        moved, _ = _move_step_fast(step, target, expected, fields)
    else:
        with transaction.atomic():
            moved = move_step_txn(
                step, target, expected=expected, new_attempt=new_attempt, **fields
            )
    if not moved:
        _raise_refused(step, target)


def move_step_taking_run_lease(
    step: WorkflowStep,
    target: str,
    lease_holder: str,
    *,
    expected: Iterable[str] | None = None,
    **fields: Any,
) -> WorkflowRun | None:
    """`move_step`, and in the same statement take the run's lease for `lease_holder` when the
    run is running and its lease free: the worker that records a step continues the pass at no
    extra round trip. Returns the run as leased; None when the lease was not taken (held, or
    no fast path here): the caller then orchestrates as usual."""
    if not (fast_path_available() and fast_path.plain(fields)):
        move_step(step, target, expected=expected, **fields)
        return None
    moved, run = _move_step_fast(step, target, expected, fields, lease_holder)
    if not moved:
        _raise_refused(step, target)
    return run


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
    step: WorkflowStep,
    target: str,
    expected: Iterable[str] | None,
    fields: dict[str, Any],
    lease_holder: str | None = None,
) -> tuple[bool, WorkflowRun | None]:
    sources = _checked_sources("step", target, step_sources(target) - {target}, expected)
    history_values: dict[str, Any] = {k: fields[k] for k in ("result", "error") if k in fields}
    history_values["status"] = target
    history_values[HISTORY_TIMESTAMP[target]] = timezone.now()
    step_values = {"status": target, **fields}
    leased = None
    if lease_holder is None:
        moved, history_found = fast_path.update_step_fenced(
            step, sources, step_values, history_values
        )
    else:
        moved, history_found, leased = fast_path.update_step_fenced_taking_lease(
            step,
            sources,
            step_values,
            history_values,
            lease_holder,
            pikku_settings.RUN_LEASE_SECONDS,
        )
    if not moved:
        return False, None
    if not history_found:
        with transaction.atomic():
            _record_history(
                step, target, {k: fields[k] for k in ("result", "error") if k in fields}
            )
    step.status = target
    for key, value in fields.items():
        setattr(step, key, value)
    return True, leased


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
