"""A run's status changes, and the start of its compensation: one guarded write per move,
refused when the run's status (or its lease holder) is not what the move expects
(`InvalidTransition`, `RunInterrupted`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from ...control_flow import RunInterrupted
from ...exceptions import InvalidTransition
from ...models import WorkflowRun
from ...observability.tracing import export_run_after_commit
from ...querysets import DatabaseNow
from ...registry import registry
from ...status import TERMINAL_RUN_STATUSES, Compensation, RunStatus, StepStatus, run_sources
from .admission_transitions import held_slots, lock_keys_txn, release_slots_txn
from .claims import lock_buffering_schedule_of_run_txn
from .overlap_transitions import admit_buffered_txn
from .run_list_fields import KEEP_ERROR, list_field_values
from .schedule_transitions import pause_for_failed_run
from .step_transitions import UnrecordedSuccess, record_step_outcome, update_recording_success
from .transitions import checked_sources, on_postgresql


def move_run(
    run_id: Any,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    lease_holder: str | None = None,
    keeps_slots: bool = False,
    scheduled: bool = True,
    after: UnrecordedSuccess | None = None,
    **fields: Any,
) -> None:
    """Move a run to `target` if its status is one of `expected` (default: every legal source).

    With `lease_holder`, the move also requires that holder to own the run lease; a move to a
    terminal status then releases the lease in the same write (a settled run is never
    orchestrated again, so a pending rerun request is moot).

    A run that ends frees its concurrency slots in the same transaction, which admits the runs
    queued on them, and admits its schedule's next buffered run (a failed one first pauses a
    schedule that pauses on failure, which then admits none): the buffering schedule's row
    first, then the keys' locks, then the run's row (the lock order of claims.sql). A caller
    that has the run's row passes `scheduled=False` for a run no schedule started: its end
    then reads no schedule. With `keeps_slots` (a run handing its slots and its schedule to its
    successor) the end frees and admits nothing: the caller holds the keys' locks and moves the
    slots in its own transaction.

    `after`: the pass's last step's success, kept for its next write: recorded by the move's
    own statement when the move is one statement on PostgreSQL (one commit fewer per run),
    else on its own first (StepSuperseded, nothing written, when a newer attempt owns it).
    """
    sources = checked_sources("run", target, run_sources(target), expected)
    ending = target in TERMINAL_RUN_STATUSES and not keeps_slots
    if not ending or not (scheduled or registry.uses_concurrency):
        if after is not None and not on_postgresql():
            record_step_outcome(after.step, StepStatus.SUCCEEDED, result=after.result)
            after = None
        _move_run(run_id, target, sources, lease_holder, fields, after)
        return
    if after is not None:
        # Its own commit first: the schedule's row and the keys' locks come before the run's.
        record_step_outcome(after.step, StepStatus.SUCCEEDED, result=after.result)
    with transaction.atomic():
        schedule_id = lock_buffering_schedule_of_run_txn(run_id) if scheduled else None
        slots = held_slots(run_id) if registry.uses_concurrency else []
        lock_keys_txn(slots)
        _move_run(run_id, target, sources, lease_holder, fields)
        if slots:
            release_slots_txn(run_id, slots)
        if schedule_id is not None:
            if target == RunStatus.FAILED:
                pause_for_failed_run(run_id)
            admit_buffered_txn(schedule_id)


def _move_run(
    run_id: Any,
    target: str,
    sources: frozenset[str],
    lease_holder: str | None,
    fields: dict[str, Any],
    after: UnrecordedSuccess | None = None,
) -> None:
    runs = WorkflowRun.objects.filter(pk=run_id, status__in=sources)
    if lease_holder is not None:
        runs = runs.filter(lease_holder=lease_holder)
    if target in TERMINAL_RUN_STATUSES:
        fields.setdefault("finished_at", DatabaseNow())
        if lease_holder is not None:
            fields.update(lease_holder=None, lease_expires_at=None, rerun_requested=False)
    elif target == RunStatus.RUNNING:
        fields.setdefault("finished_at", None)
    succeeded = None if after is None else after.step.pk
    listed = list_field_values(target, fields.get("error", KEEP_ERROR), succeeded)
    values = {"status": target, "updated_at": DatabaseNow(), **listed, **fields}
    updated = (
        runs.update(**values) if after is None else update_recording_success(runs, values, after)
    )
    if updated:
        if target == RunStatus.FAILED:
            # After the commit, in a transaction of its own: the firing timer loop holds a
            # schedule before its runs, so this must not hold a run while it waits for one.
            transaction.on_commit(lambda: pause_for_failed_run(run_id))
        if target in TERMINAL_RUN_STATUSES:
            export_run_after_commit(run_id, target, fields.get("error"))
        return
    current = WorkflowRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if lease_holder is not None and current in sources:
        raise RunInterrupted(f"run {run_id} lease is no longer held by this pass")
    raise InvalidTransition("run", current, target)


def begin_compensation(
    run_id: Any, cause: dict[str, Any], *, lease_holder: str | None = None
) -> None:
    """Start undoing a running run's succeeded steps (`compensate=`): `compensation` running,
    `cause` the error it ends with once they are undone (its body's failure, or a cancel).

    With `lease_holder` (the pass that met the failure) only while that pass holds the lease,
    which it keeps; without (an operator's cancel) the lease is taken from whichever pass holds
    it: its next guarded write stops it, and the pass that follows undoes instead of replaying.
    """
    runs = WorkflowRun.objects.filter(pk=run_id, status=RunStatus.RUNNING)
    changes: dict[str, Any] = {
        "compensation": Compensation.RUNNING,
        "compensation_cause": cause,
        "error": None,
        "updated_at": DatabaseNow(),
    }
    if lease_holder is not None:
        runs = runs.filter(lease_holder=lease_holder)
    else:
        changes.update(lease_holder=None, lease_expires_at=None, rerun_requested=False)
    if runs.update(**changes):
        return
    current = WorkflowRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if lease_holder is not None and current == RunStatus.RUNNING:
        raise RunInterrupted(f"run {run_id} lease is no longer held by this pass")
    raise InvalidTransition("run", current, Compensation.RUNNING.label.lower())
