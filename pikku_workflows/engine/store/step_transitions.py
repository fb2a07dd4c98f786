"""Every status change of a step: one guarded write, plus the step's history row, per move. The
hot paths (create it, claim it, record its outcome) are one named statement each on PostgreSQL
(`step_transitions.sql`, composing the run locks of `claims.sql`); elsewhere, and for the rarer
moves, the ORM in one short transaction.

A guard that matches no row is an illegal move (`InvalidTransition`), a stale attempt
(`StepSuperseded`) or a run that stopped being ours (`RunInterrupted`); nothing is written then.
Leases and timers are set on the database clock; history times come from the application clock,
like the rows' `created_at`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import BooleanField, F, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from ... import events
from ...conf import pikku_settings
from ...control_flow import RunInterrupted
from ...dispatch import QueueMessage, queue_fragments
from ...exceptions import InvalidTransition, StepSuperseded
from ...models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from ...observability.instruments import record_schedule_to_start_after_commit, seconds_between
from ...observability.tracing import (
    export_attempt_after_commit,
    export_attempt_from_rows_after_commit,
)
from ...querysets import DatabaseNow, database_in
from ...sql import Statements
from ...status import (
    HISTORY_TIMESTAMP,
    RunStatus,
    StepDispatch,
    StepKind,
    StepStatus,
    step_sources,
)
from ...worker_registration import this_process
from .claims import lock_running_run_txn
from .run_list_fields import parked_list_params
from .tables import engine_names
from .transitions import checked_sources, history_stamps, on_postgresql

STATEMENTS = Statements(
    Path(__file__).with_name("step_transitions.sql"),
    Path(__file__).with_name("claims.sql"),
    names=engine_names,
    fragments=queue_fragments,
)
# Step columns the database sets from seconds given (on its clock), never from a value.
CLOCKED = ("lease_expires_at", "wake_at")
# A named parameter of a block (`%(name)s`), for a statement that composes a block with the ORM's
# positional SQL.
_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s")
# The statuses that end an attempt (its history row then has its outcome time).
ENDED = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED})


@dataclass(frozen=True)
class UnrecordedSuccess:
    """A step attempt's result its pass has not written yet: the write that creates the pass's
    next step records it, fenced as ever (one commit per step). Until then the step is
    `succeeded` in the pass's memory only; a crash in between re-runs it once."""

    step: WorkflowStep
    result: Any
    finished_at: datetime  # when the attempt returned: its history's succeeded_at


# --- creating steps ------------------------------------------------------------------------


def create_step_in_run(
    run_id: Any,
    lease_holder: str,
    step_key: str,
    *,
    status: str,
    lease_seconds: float | None = None,
    wake_in_ms: int | None = None,
    dispatch: str | None = None,
    after: UnrecordedSuccess | None = None,
    **fields: Any,
) -> WorkflowStep:
    """Insert a step with its first history row into a run this pass holds: one commit.

    `lease_seconds` / `wake_in_ms` set its lease / timer that far ahead on the database clock;
    `dispatch` says how its first attempt runs (a `StepDispatch`; None: not decided yet);
    `after`: the previous step's success, recorded in the same statement (StepSuperseded when
    a newer attempt owns that step, and then nothing is written).
    """
    step = WorkflowStep(id=uuid.uuid4(), run_id=run_id, step_key=step_key, status=status, **fields)
    if not on_postgresql():
        if after is not None:
            record_step_outcome(after.step, StepStatus.SUCCEEDED, result=after.result)
        with transaction.atomic():
            lock_running_run_txn(run_id, lease_holder)
            return _save_new_step_txn(step, lease_seconds, wake_in_ms, dispatch)
    params = _new_step_params(step, lease_seconds, wake_in_ms, dispatch)
    params |= {"lease_holder": lease_holder, "run_running": RunStatus.RUNNING}
    if after is None:
        row = _fetch_one("insert_step_in_run", params)
    else:
        row = _record_and_insert(after, params)
    if row is None:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")
    step.lease_expires_at, step.wake_at = row
    step._state.adding, step._state.db = False, connection.alias
    note_attempt_start(step, status, step.created_at, dispatch)
    note_attempt_end(step, step.created_at if status in ENDED else None)
    if status in ENDED:
        export_attempt_after_commit(step)
    return step


def _record_and_insert(after: UnrecordedSuccess, params: dict[str, Any]) -> tuple[Any, Any] | None:
    """Run `record_outcome_and_insert_step`: the new step's (lease, timer), or None when the run
    stopped running under the pass (the outcome is recorded all the same)."""
    fields = _success_fields(after)
    params |= _outcome_params(after.step, StepStatus.SUCCEEDED, fields, None, after.finished_at)
    row = _fetch_one("record_outcome_and_insert_step", params)
    assert row is not None, "the statement always answers one row"
    outcome_moved, inserted, lease, timer = row
    if not outcome_moved:
        _raise_refused(after.step, StepStatus.SUCCEEDED)
    _mark_recorded(after.step, StepStatus.SUCCEEDED, fields, None, after.finished_at)
    return (lease, timer) if inserted else None


def update_recording_success(
    runs: QuerySet[WorkflowRun], values: dict[str, Any], after: UnrecordedSuccess
) -> int:
    """`runs.update(**values)` (the ORM's UPDATE of a run, e.g. the one that ends it) in the
    statement that records `after`, the pass's last step's success, fenced as ever: the run
    moves only once the step did (one commit for both). Returns the runs updated; raises
    StepSuperseded (nothing written) when a newer attempt owns the step."""
    fields = _success_fields(after)
    named = _outcome_params(after.step, StepStatus.SUCCEEDED, fields, None, after.finished_at)
    statement, names = _positional(STATEMENTS["record_outcome_and_update_run"])
    moved = RawSQL("EXISTS (SELECT 1 FROM moved)", (), output_field=BooleanField())
    query = cast(UpdateQuery, runs.filter(moved).query.chain(UpdateQuery))
    query.add_update_values(values)
    update, update_params = query.get_compiler(connection.alias).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(
            statement.replace("{run_update}", update),
            [named[name] for name in names] + list(update_params),
        )
        step_moved, updated = cursor.fetchone()
    if not step_moved:
        _raise_refused(after.step, StepStatus.SUCCEEDED)
    _mark_recorded(after.step, StepStatus.SUCCEEDED, fields, None, after.finished_at)
    return int(updated)


def _success_fields(after: UnrecordedSuccess) -> dict[str, Any]:
    return {
        "result": after.result,
        "error": None,
        "attempt_limit": after.step.attempt_limit,
        "branch_taken": after.step.branch_taken,
    }


def _positional(block: str) -> tuple[str, list[str]]:
    """`block` with its named parameters as positional ones, and their names in order."""
    names = _NAMED_PARAMETER.findall(block)
    return _NAMED_PARAMETER.sub("%s", block), names


def create_dispatched_step(
    run_id: Any, lease_holder: str, step_key: str, message: QueueMessage, **fields: Any
) -> tuple[WorkflowStep, bool]:
    """Insert a queued step straight into `scheduled` with its queue message, and release the
    run lease: one statement (PostgreSQL with django-q2's queue in this database), so the
    message never names a step that was not written, and a worker that finishes the step at
    once finds the lease free.

    Returns the step and whether the lease was released (False: a rerun was requested; the
    caller still holds it and must release it as usual).
    """
    step = WorkflowStep(
        id=uuid.uuid4(), run_id=run_id, step_key=step_key, status=StepStatus.SCHEDULED, **fields
    )
    params = _new_step_params(step, None, None, StepDispatch.QUEUED) | message.params()
    params |= {"lease_holder": lease_holder, "run_running": RunStatus.RUNNING}
    params |= parked_list_params([step_key])
    row = _fetch_one("insert_dispatched_step", params)
    if row is None:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")
    released, messages = row
    assert messages == 1, "the message is written with the step"
    step._state.adding, step._state.db = False, connection.alias
    return step, bool(released)


def create_step_txn(
    run_id: Any,
    step_key: str,
    *,
    status: str = StepStatus.PENDING,
    lease_seconds: float | None = None,
    wake_in_ms: int | None = None,
    dispatch: str | None = None,
    **fields: Any,
) -> WorkflowStep:
    """Inside a transaction: insert a step with its first history row (attempt 1)."""
    step = WorkflowStep(id=uuid.uuid4(), run_id=run_id, step_key=step_key, status=status, **fields)
    return _save_new_step_txn(step, lease_seconds, wake_in_ms, dispatch)


def park_step_txn(
    run_id: Any,
    step_key: str,
    step: WorkflowStep | None,
    *,
    kind: str,
    data: Any,
    from_step_key: str | None,
    wake_in_ms: int | None,
) -> WorkflowStep:
    """Inside a transaction: the step `waiting` for something outside the run (an approval, a
    signal), its timer `wake_in_ms` ahead on the database clock (None: no timer). Created so
    (one attempt, no retries), or moved there from `pending` when the pass made it earlier."""
    if step is None:
        return create_step_txn(
            run_id,
            step_key,
            status=StepStatus.WAITING,
            kind=kind,
            data=data,
            from_step_key=from_step_key,
            retries=0,
            attempt_limit=1,
            wake_in_ms=wake_in_ms,
        )
    timer = None if wake_in_ms is None else database_in(wake_in_ms / 1000)
    if not move_step_txn(step, StepStatus.WAITING, expected=[StepStatus.PENDING], wake_at=timer):
        raise InvalidTransition(f"step {step_key!r}", step.status, StepStatus.WAITING)
    return step


def _save_new_step_txn(
    step: WorkflowStep, lease_seconds: float | None, wake_in_ms: int | None, dispatch: str | None
) -> WorkflowStep:
    assert transaction.get_connection().in_atomic_block
    clocked = _clocked(lease_seconds, wake_in_ms)
    for name, value in clocked.items():
        setattr(step, name, value)
    step.save(force_insert=True)
    if clocked:
        step.refresh_from_db(fields=list(clocked))
    history = WorkflowStepHistory(
        step=step,
        attempt=step.attempt,
        status=step.status,
        function_name=step.function_name,
        dispatch=dispatch,
        worker=_runner(step.status),
        result=step.result,
        error=step.error,
        # A step created straight into `running` keeps its `pending` moment as created_at, so
        # the timeline still shows both.
        created_at=step.created_at,
        **history_stamps(step.status, step.created_at),
    )
    history.save(force_insert=True)
    note_attempt_start(step, step.status, step.created_at, dispatch)
    note_attempt_end(step, step.created_at if step.status in ENDED else None)
    if step.status in ENDED:
        export_attempt_after_commit(step)
    return step


def _clocked(lease_seconds: float | None, wake_in_ms: int | None) -> dict[str, Any]:
    """The lease / timer columns as expressions on the database clock, for the ORM forms."""
    clocked: dict[str, Any] = {}
    if lease_seconds is not None:
        clocked["lease_expires_at"] = database_in(lease_seconds)
    if wake_in_ms is not None:
        clocked["wake_at"] = database_in(wake_in_ms / 1000)
    return clocked


def _new_step_params(
    step: WorkflowStep, lease_seconds: float | None, wake_in_ms: int | None, dispatch: str | None
) -> dict[str, Any]:
    """The named parameters of `new_step_values` and `first_history_row` for `step`."""
    # The connection itself, not the per-thread proxy each field would look it up through.
    db = connections[DEFAULT_DB_ALIAS]
    params: dict[str, Any] = {
        str(field.column): field.get_db_prep_save(field.pre_save(step, add=True), db)
        for field in WorkflowStep._meta.concrete_fields
        if field.column not in CLOCKED
    }
    params["dispatch"] = dispatch
    params["worker"] = _runner(step.status)
    params["lease_seconds"] = lease_seconds
    params["wake_in_seconds"] = None if wake_in_ms is None else wake_in_ms / 1000
    return params | history_stamps(step.status, step.created_at)


def _fetch_one(statement: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS[statement], params)
        return cursor.fetchone()


# --- moving steps --------------------------------------------------------------------------


def record_step_outcome(
    step: WorkflowStep,
    target: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    attempt_limit: int | None = None,
    wake_in_ms: int | None = None,
    take_run_lease_for: str | None = None,
) -> WorkflowRun | None:
    """Record the running attempt's outcome (`succeeded` or `failed`), fenced by its attempt:
    raises StepSuperseded when a newer attempt owns the step. `wake_in_ms`: a retry's timer.

    With `take_run_lease_for` (a lease holder), the same write also takes the run's lease when
    the run is running and the lease free or lapsed; the run comes back leased, else None.
    """
    fields = {
        "result": result,
        "error": error,
        "attempt_limit": attempt_limit or step.attempt_limit,
        # The branch the attempt chose (`ctx.branch`) counts only with its result.
        "branch_taken": step.branch_taken if target == StepStatus.SUCCEEDED else None,
    }
    if not on_postgresql():
        timer = _clocked(None, wake_in_ms).get("wake_at")
        move_step(
            step,
            target,
            expected=[StepStatus.RUNNING],
            lease_expires_at=None,
            wake_at=timer,
            **fields,
        )
        return None
    at = timezone.now()
    params = _outcome_params(step, target, fields, wake_in_ms, at)
    leased, moved, wake_at = None, False, None
    if take_run_lease_for is None:
        row = _fetch_one("record_step_outcome", params)
        moved, wake_at = row is not None, row[0] if row else None
    else:
        params |= {"lease_holder": take_run_lease_for, "run_running": RunStatus.RUNNING}
        params["run_lease_seconds"] = pikku_settings.RUN_LEASE_SECONDS
        sql = STATEMENTS["record_step_outcome_taking_run_lease"]
        run = next(iter(WorkflowRun.objects.raw(sql, params)))
        moved, wake_at = bool(run.step_moved), run.step_wake_at  # type: ignore[attr-defined]
        leased = run if run.pk is not None else None
    if not moved:
        _raise_refused(step, target)
    _mark_recorded(step, target, fields, wake_at, at)
    if target == StepStatus.FAILED:
        events.announce_attempt_failed(step)
    return leased


def _mark_recorded(
    step: WorkflowStep, target: str, fields: dict[str, Any], wake_at: Any, at: datetime
) -> None:
    step.status, step.lease_expires_at, step.wake_at = target, None, wake_at
    for name, value in fields.items():
        setattr(step, name, value)
    note_attempt_end(step, at)
    export_attempt_after_commit(step)


def note_attempt_start(step: WorkflowStep, target: str, at: datetime, dispatch: Any) -> None:
    """Keep on `step` when its attempt started running and how it got there, as its history
    row records them (its span is built from them once the attempt ends)."""
    if target == StepStatus.RUNNING:
        step.attempt_started_at, step.attempt_dispatch = at, dispatch  # type: ignore[attr-defined]


def note_attempt_end(step: WorkflowStep, at: datetime | None) -> None:
    """Keep on `step` when its attempt ended, as its history row records it (what `wf.now()`
    moves on to; a pass that reads the step later gets the same from `with_attempt_end`)."""
    step.ended_at = at  # type: ignore[attr-defined]


def _outcome_params(
    step: WorkflowStep,
    target: str,
    fields: dict[str, Any],
    wake_in_ms: int | None,
    at: datetime | None = None,
) -> dict[str, Any]:
    """The named parameters of `step_outcome_ctes` (prefixed: they share statements with a new
    step's)."""
    json_field = WorkflowStep._meta.get_field("result")
    db = connections[DEFAULT_DB_ALIAS]
    params = {
        "step_id": step.pk,
        "attempt": step.attempt,
        "sources": [StepStatus.RUNNING],
        "status": target,
        "result": json_field.get_db_prep_save(fields["result"], db),
        "error": json_field.get_db_prep_save(fields["error"], db),
        "attempt_limit": fields["attempt_limit"],
        "branch_taken": fields["branch_taken"],
        "wake_in_seconds": None if wake_in_ms is None else wake_in_ms / 1000,
        **history_stamps(target, at or timezone.now()),
    }
    return {f"outcome_{name}": value for name, value in params.items()}


def claim_queued_step(
    run_id: Any, step_key: str, function_names: Iterable[str]
) -> WorkflowStep | None:
    """A worker's claim of a pending or scheduled step of a running run whose function it has:
    running under a fresh lease, in one statement (PostgreSQL). The step comes back with
    `started_by_name` and `workflow_name` attributes; None when nothing matched (or not on PostgreSQL): the general
    claim (`attempts.claim_next_attempt`) decides why."""
    if not on_postgresql():
        return None
    sources = step_sources(StepStatus.RUNNING) & {StepStatus.PENDING, StepStatus.SCHEDULED}
    params = {
        "run_id": run_id,
        "run_running": RunStatus.RUNNING,
        "running": StepStatus.RUNNING,
        "queued": StepDispatch.QUEUED,
        "lease_seconds": pikku_settings.STEP_LEASE_SECONDS,
        "step_key": step_key,
        "sources": sorted(sources),
        "function_names": list(function_names),
        "running_at": timezone.now(),
        "worker": this_process(),
    }
    step = next(iter(WorkflowStep.objects.raw(STATEMENTS["claim_queued_step"], params)), None)
    if step is not None:
        note_attempt_start(step, StepStatus.RUNNING, params["running_at"], StepDispatch.QUEUED)
        waited = seconds_between(step.attempt_queued_at, params["running_at"])  # type: ignore[attr-defined]
        record_schedule_to_start_after_commit(step.function_name, waited)
    return step


def retarget_unstarted_step(step: WorkflowStep, **fields: Any) -> bool:
    """Give a step no attempt ran (pending on attempt 1) what the code asks for now (`fields`:
    kind, function name, data, retry options) in one guarded write; False, and nothing
    written, when an attempt started meanwhile. Not a status change: no history row moves."""
    unstarted = WorkflowStep.objects.filter(pk=step.pk, status=StepStatus.PENDING, attempt=1)
    with transaction.atomic():
        if not unstarted.update(**fields, updated_at=DatabaseNow()):
            return False
        if "function_name" in fields:
            first_attempt = WorkflowStepHistory.objects.filter(step_id=step.pk, attempt=1)
            first_attempt.update(function_name=fields["function_name"])
    _apply(step, fields)
    return True


def move_step(
    step: WorkflowStep,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    new_attempt: bool = False,
    **fields: Any,
) -> None:
    """Move `step` (as last read, fenced by its attempt) to `target`, with its history row, in
    one short transaction. `new_attempt` advances the attempt in the same guarded write,
    fencing out the previous attempt's worker. `step` is updated in memory on success."""
    with transaction.atomic():
        moved = move_step_txn(step, target, expected=expected, new_attempt=new_attempt, **fields)
    if not moved:
        _raise_refused(step, target)


def move_step_txn(
    step: WorkflowStep,
    target: str,
    *,
    expected: Iterable[str] | None = None,
    new_attempt: bool = False,
    dispatch: str | None = None,
    **fields: Any,
) -> bool:
    """Inside a transaction: `move_step` without raising; False (nothing written) when refused.

    Field values may be database expressions (a lease or timer on its clock); they are read
    back into `step` after the write. `dispatch` records how the attempt now running got here.
    """
    assert transaction.get_connection().in_atomic_block
    allowed = step_sources(target)
    if not new_attempt:
        # running -> running is only a re-claim (a new attempt); as a plain move it would let
        # two claimers of the same attempt both win (the second re-reads `running` and matches).
        allowed -= {target}
    sources = checked_sources("step", target, allowed, expected)
    guarded = WorkflowStep.objects.filter(pk=step.pk, attempt=step.attempt, status__in=sources)
    changes = {"status": target, "updated_at": DatabaseNow(), **fields}
    if new_attempt:
        changes["attempt"] = F("attempt") + 1
    if not guarded.update(**changes):
        return False
    outcome: dict[str, Any] = {key: fields[key] for key in ("result", "error") if key in fields}
    if dispatch is not None:
        outcome["dispatch"] = dispatch
    if target == StepStatus.RUNNING:
        outcome["worker"] = this_process()
    if new_attempt:
        _open_attempt_txn(step, target, outcome)
    else:
        _stamp_attempt_txn(step, target, outcome)
    step.status = target
    _apply(step, fields)
    if target in ENDED:
        # After `_apply`: the span says what was written (the error of a failed attempt).
        export_attempt_after_commit(step)
    if target == StepStatus.FAILED:
        events.announce_attempt_failed(step)
    return True


def _open_attempt_txn(step: WorkflowStep, target: str, outcome: dict[str, Any]) -> None:
    history = WorkflowStepHistory(
        step_id=step.pk,
        attempt=step.attempt + 1,
        status=target,
        function_name=step.function_name,
        **outcome,
    )
    at = timezone.now()
    note_attempt_start(step, target, at, outcome.get("dispatch"))
    if target != StepStatus.PENDING:
        setattr(history, HISTORY_TIMESTAMP[target], at)
    history.save(force_insert=True)
    # Only now: if the insert fails the transaction rolls back, and `step` must still match.
    step.attempt = history.attempt
    note_attempt_end(step, at if target in ENDED else None)


def _stamp_attempt_txn(step: WorkflowStep, target: str, outcome: dict[str, Any]) -> None:
    changes = {"status": target, **outcome}
    at = timezone.now()
    note_attempt_start(step, target, at, outcome.get("dispatch"))
    if target != StepStatus.PENDING:
        changes[HISTORY_TIMESTAMP[target]] = at
    WorkflowStepHistory.objects.filter(step_id=step.pk, attempt=step.attempt).update(**changes)
    if target in ENDED:
        note_attempt_end(step, at)


def _apply(step: WorkflowStep, fields: dict[str, Any]) -> None:
    """Copy the written values into `step`; read back those the database computed."""
    computed = []
    for name, value in fields.items():
        if hasattr(value, "resolve_expression"):
            computed.append(name)
        else:
            setattr(step, name, value)
    if computed:
        step.refresh_from_db(fields=computed)


def _runner(status: str) -> str | None:
    """Who the history names as running an attempt created in `status`: this process, if it
    runs it now."""
    return this_process() if status == StepStatus.RUNNING else None


def end_lapsed_attempt_txn(step: Any, error: dict[str, Any]) -> str | None:
    """Inside the transaction that claims `step` (its row locked, its lease lapsed): end the
    lapsed attempt's history row `failed` with `error`, at the moment its lease lapsed, so no
    attempt stays running for ever and the timeline shows the break before the next one.
    Returns the process that ran it (None if unknown)."""
    assert transaction.get_connection().in_atomic_block
    attempt = WorkflowStepHistory.objects.filter(
        step_id=step.pk, attempt=step.attempt, status=StepStatus.RUNNING
    )
    worker = attempt.values_list("worker", flat=True).first()
    if attempt.update(status=StepStatus.FAILED, error=error, failed_at=step.lease_expires_at):
        export_attempt_from_rows_after_commit(step.pk, step.attempt)
    return worker


def _raise_refused(step: WorkflowStep, target: str) -> None:
    current = WorkflowStep.objects.filter(pk=step.pk).values("status", "attempt").first()
    if current is None:
        raise InvalidTransition("step", None, target)
    if current["attempt"] != step.attempt:
        raise StepSuperseded(step.step_key, step.attempt)
    raise InvalidTransition(f"step {step.step_key!r}", current["status"], target)


@dataclass(frozen=True)
class HandedOver:
    """A signal a wait took: the signal's id, the wait's step (id, key, attempt) and when its
    attempt ended (what `wf.now()` moves on to)."""

    signal: int
    step: Any
    step_key: str
    attempt: int
    ended_at: datetime | None


def hand_over_signal_txn(run_id: Any, name: str) -> HandedOver | None:
    """Inside the run's lock (PostgreSQL): the oldest kept signal `name` handed to the oldest
    wait for it in one statement, as `move_step_txn` moves the wait (`signal_rows` decides when
    this applies); None when either is missing."""
    assert transaction.get_connection().in_atomic_block
    params: dict[str, Any] = {
        "run_id": str(run_id),
        "name": name,
        "waiting": StepStatus.WAITING,
        "succeeded": StepStatus.SUCCEEDED,
        "signal_kind": StepKind.SIGNAL,
        "now": timezone.now(),
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["hand_over_signal"], params)
        row = cursor.fetchone()
    if row is None:
        return None
    signal, step, step_key, attempt = row
    handed = HandedOver(signal, step, step_key, attempt, ended_at=params["now"])
    export_attempt_from_rows_after_commit(handed.step, handed.attempt)
    return handed
