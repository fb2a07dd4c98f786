"""Single-statement PostgreSQL forms of the two writes every step makes (create, record).

The ORM forms in `transitions` are the reference; these issue the same rows in one round trip
each (measured: the ORM's own CPU cost per step exceeded the database's). Values are adapted
by the model fields themselves (`get_db_prep_save`), so they are stored exactly as the ORM
would store them; the statement text is built once per column set and cached.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django_q.models import OrmQ

from ..broker import WAKE_CHANNEL
from ..models import WorkflowRun, WorkflowStep, WorkflowStepHistory, WorkflowVersion
from ..status import RunStatus

HISTORY_SKIPPED = ("id", "step")


def plain(fields: dict[str, Any]) -> bool:
    """True when no value is a database expression (those need the ORM's compiler)."""
    return not any(hasattr(value, "resolve_expression") for value in fields.values())


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)


def _inserted_fields(model: type[Model], skip: tuple[str, ...] = ()) -> list[Field]:
    return [field for field in model._meta.concrete_fields if field.name not in skip]


def _cast(field: Field) -> str:
    return f"%s::{field.db_type(connection)}"


def _column(field: Field) -> str:
    assert field.column is not None  # concrete fields always have one
    return _quoted(field.column)


def _insert_values(instance: Model, fields: list[Field]) -> list[Any]:
    return [
        field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields
    ]


def _step_inserts(source: str) -> str:
    """CTEs `new_step` (inserted for the one row `source` yields, none otherwise) and `history`
    (its first history row). Parameters: the step's values, then the history row's."""
    step_fields = _inserted_fields(WorkflowStep)
    history_fields = _inserted_fields(WorkflowStepHistory, HISTORY_SKIPPED)
    return f"""
        new_step AS (
            INSERT INTO {_quoted(WorkflowStep._meta.db_table)}
                ({", ".join(_column(f) for f in step_fields)})
            SELECT {", ".join(_cast(f) for f in step_fields)} FROM {source} RETURNING id
        ), history AS (
            INSERT INTO {_quoted(WorkflowStepHistory._meta.db_table)}
                (step_id, {", ".join(_column(f) for f in history_fields)})
            SELECT new_step.id, {", ".join(_cast(f) for f in history_fields)} FROM new_step
            RETURNING step_id
        )"""


def _guarded_step_values(
    run_id: Any,
    lease_holder: str,
    step: WorkflowStep,
    history: WorkflowStepHistory,
    stamp_first_attempt: Callable[[WorkflowStepHistory, WorkflowStep], None],
) -> list[Any]:
    """The guard's parameters (the run running under `lease_holder`), then `_step_inserts`'."""
    step_values = _insert_values(step, _inserted_fields(WorkflowStep))  # stamps created_at
    stamp_first_attempt(history, step)
    return [
        run_id,
        RunStatus.RUNNING,
        lease_holder,
        *step_values,
        *_insert_values(history, _inserted_fields(WorkflowStepHistory, HISTORY_SKIPPED)),
    ]


@functools.cache
def _insert_step_sql() -> str:
    return f"""
        WITH guard AS (
            SELECT 1 FROM {_quoted(WorkflowRun._meta.db_table)}
            WHERE id = %s AND status = %s AND lease_holder = %s FOR SHARE
        ), {_step_inserts("guard")}
        SELECT step_id FROM history
    """


def insert_step_guarded(
    run_id: Any,
    lease_holder: str,
    step: WorkflowStep,
    history: WorkflowStepHistory,
    stamp_first_attempt: Callable[[WorkflowStepHistory, WorkflowStep], None],
) -> bool:
    """Insert the step and its history row if the run is running under `lease_holder`.

    FOR SHARE holds the run row against a concurrent cancel or suspend (whose UPDATE waits)
    without writing it. False when the guard matched nothing (nothing inserted).
    """
    params = _guarded_step_values(run_id, lease_holder, step, history, stamp_first_attempt)
    with connection.cursor() as cursor:
        cursor.execute(_insert_step_sql(), params)
        return cursor.fetchone() is not None


@functools.cache
def _insert_run_sql(leased: bool) -> str:
    version_fields = _inserted_fields(WorkflowVersion, ("id",))
    run_fields = _inserted_fields(WorkflowRun)
    run_values = [
        # A lease is judged on the database clock: its expiry is computed there.
        "CLOCK_TIMESTAMP() + make_interval(secs => %s)"
        if leased and f.name == "lease_expires_at"
        else _cast(f)
        for f in run_fields
    ]
    return f"""
        WITH version AS (
            INSERT INTO {_quoted(WorkflowVersion._meta.db_table)}
                ({", ".join(_column(f) for f in version_fields)})
            VALUES ({", ".join(_cast(f) for f in version_fields)})
            ON CONFLICT DO NOTHING
        )
        INSERT INTO {_quoted(WorkflowRun._meta.db_table)}
            ({", ".join(_column(f) for f in run_fields)})
        VALUES ({", ".join(run_values)})
    """


def insert_run_with_version(
    run: WorkflowRun, version: WorkflowVersion, lease_seconds: float | None
) -> None:
    """Upsert the version row and insert the run in one statement (the run's `lease_expires_at`
    set to now + `lease_seconds` on the database clock when given)."""
    run_values = _insert_values(run, _inserted_fields(WorkflowRun))  # stamps created_at
    if lease_seconds is not None:
        position = [f.name for f in _inserted_fields(WorkflowRun)].index("lease_expires_at")
        run_values[position] = lease_seconds
    params = [*_insert_values(version, _inserted_fields(WorkflowVersion, ("id",))), *run_values]
    with connection.cursor() as cursor:
        cursor.execute(_insert_run_sql(lease_seconds is not None), params)
    run._state.adding, run._state.db = False, connection.alias  # as `save()` leaves it


@functools.cache
def _insert_dispatched_step_sql() -> str:
    message_fields = _inserted_fields(OrmQ, ("id",))
    return f"""
        WITH lease AS (
            -- The guard and the lease's release in one write: the run must still be running
            -- under this pass (the row stays locked until commit, so a cancel waits), and the
            -- lease is handed back unless another pass was asked for meanwhile.
            UPDATE {_quoted(WorkflowRun._meta.db_table)} SET
                lease_holder = CASE WHEN rerun_requested THEN lease_holder END,
                lease_expires_at = CASE WHEN rerun_requested THEN lease_expires_at END
            WHERE id = %s AND status = %s AND lease_holder = %s
            RETURNING NOT rerun_requested AS released
        ), {_step_inserts("lease")}, message AS (
            INSERT INTO {_quoted(OrmQ._meta.db_table)}
                ({", ".join(_column(f) for f in message_fields)})
            SELECT {", ".join(_cast(f) for f in message_fields)} FROM history RETURNING id
        ), notified AS (
            -- As the broker's own enqueue: wakes an idle pusher of the queue at commit.
            SELECT pg_notify(%s, %s) FROM message
        )
        SELECT lease.released, (SELECT count(*) FROM notified) FROM lease
    """


def insert_dispatched_step(
    run_id: Any,
    lease_holder: str,
    step: WorkflowStep,
    history: WorkflowStepHistory,
    stamp_first_attempt: Callable[[WorkflowStepHistory, WorkflowStep], None],
    message: Any,
) -> bool | None:
    """Insert the step (scheduled) with its history row and its queue message, and release the
    run lease, in one statement, if the run is running under `lease_holder`.

    None when the guard matched nothing (nothing written); else whether the lease was released
    (False: a rerun was requested, the caller still holds it).
    """
    queued = OrmQ(key=message.key, payload=message.payload, lock=message.lock)
    params = [
        *_guarded_step_values(run_id, lease_holder, step, history, stamp_first_attempt),
        *_insert_values(queued, _inserted_fields(OrmQ, ("id",))),
        WAKE_CHANNEL,
        message.key,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_dispatched_step_sql(), params)
        row = cursor.fetchone()
    if row is None:
        return None
    released, notified = row
    assert notified == 1, "the message is inserted (and announced) with the step"
    return bool(released)


def _update_step_ctes(step_names: tuple[str, ...], history_names: tuple[str, ...]) -> str:
    """CTEs `moved` (the step, fenced by attempt and status) and `history` (that attempt's row).
    Parameters: the step's new values, its id, attempt and source statuses, the history row's
    new values, the attempt again."""
    return f"""
        WITH moved AS (
            UPDATE {_quoted(WorkflowStep._meta.db_table)}
            SET {_assignments(WorkflowStep, step_names)}, updated_at = CLOCK_TIMESTAMP()
            WHERE id = %s AND attempt = %s AND status = ANY(%s) RETURNING id, run_id
        ), history AS (
            UPDATE {_quoted(WorkflowStepHistory._meta.db_table)}
            SET {_assignments(WorkflowStepHistory, history_names)}
            WHERE step_id = (SELECT id FROM moved) AND attempt = %s RETURNING 1
        )"""


@functools.cache
def _update_step_sql(step_names: tuple[str, ...], history_names: tuple[str, ...]) -> str:
    return f"""{_update_step_ctes(step_names, history_names)}
        SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM history)
    """


@functools.cache
def _update_step_taking_lease_sql(
    step_names: tuple[str, ...], history_names: tuple[str, ...]
) -> str:
    run_columns = ", ".join(_column(f) for f in _inserted_fields(WorkflowRun))
    return f"""{_update_step_ctes(step_names, history_names)}, lease AS (
            -- Free or lapsed, as in `acquire_run_lease`; only once the step has moved.
            UPDATE {_quoted(WorkflowRun._meta.db_table)}
            SET lease_holder = %s, rerun_requested = false, updated_at = CLOCK_TIMESTAMP(),
                lease_expires_at = CLOCK_TIMESTAMP() + make_interval(secs => %s)
            WHERE id = (SELECT run_id FROM moved) AND status = %s
                AND (lease_holder IS NULL OR lease_expires_at < CLOCK_TIMESTAMP())
            RETURNING {run_columns}
        )
        SELECT lease.*, (SELECT count(*) FROM moved) AS moved,
            (SELECT count(*) FROM history) AS history_found
        FROM (SELECT 1) AS one LEFT JOIN lease ON TRUE
    """


def _assignments(model: type[Model], names: tuple[str, ...]) -> str:
    return ", ".join(
        f"{_column(_field(model, name))} = {_cast(_field(model, name))}" for name in names
    )


def _field(model: type[Model], name: str) -> Field:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def _update_values(model: type[Model], changes: dict[str, Any]) -> list[Any]:
    return [
        _field(model, name).get_db_prep_save(value, connection) for name, value in changes.items()
    ]


def _update_step_params(
    step: WorkflowStep,
    sources: Iterable[str],
    step_changes: dict[str, Any],
    history_changes: dict[str, Any],
) -> list[Any]:
    return [
        *_update_values(WorkflowStep, step_changes),
        step.pk,
        step.attempt,
        list(sources),
        *_update_values(WorkflowStepHistory, history_changes),
        step.attempt,
    ]


def update_step_fenced(
    step: WorkflowStep,
    sources: Iterable[str],
    step_changes: dict[str, Any],
    history_changes: dict[str, Any],
) -> tuple[bool, bool]:
    """Update the step (guarded by its attempt and status) and that attempt's history row.

    Returns (step moved, history row found); a missing history row is repaired by the caller.
    """
    sql = _update_step_sql(tuple(step_changes), tuple(history_changes))
    params = _update_step_params(step, sources, step_changes, history_changes)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        moved, history_found = cursor.fetchone()
    return bool(moved), bool(history_found)


def update_step_fenced_taking_lease(
    step: WorkflowStep,
    sources: Iterable[str],
    step_changes: dict[str, Any],
    history_changes: dict[str, Any],
    lease_holder: str,
    lease_seconds: float,
) -> tuple[bool, bool, WorkflowRun | None]:
    """`update_step_fenced`, and if the step moved, take its run's lease for `lease_holder` when
    the run is running and the lease free or lapsed, all in one statement.

    Returns (step moved, history row found, the run as leased or None when not taken).
    """
    sql = _update_step_taking_lease_sql(tuple(step_changes), tuple(history_changes))
    params = [
        *_update_step_params(step, sources, step_changes, history_changes),
        lease_holder,
        lease_seconds,
        RunStatus.RUNNING,
    ]
    row = next(iter(WorkflowRun.objects.raw(sql, params)))
    moved, history_found = row.moved, row.history_found  # type: ignore[attr-defined]
    return bool(moved), bool(history_found), row if row.pk is not None else None


@functools.cache
def _claim_fresh_step_sql() -> str:
    from django.contrib.auth import get_user_model

    user = get_user_model()
    username = user._meta.get_field(user.USERNAME_FIELD)
    assert isinstance(username, Field)
    run, step = WorkflowRun._meta.db_table, WorkflowStep._meta.db_table
    history = WorkflowStepHistory._meta.db_table
    returned = ", ".join(f"claimed.{_column(f)}" for f in _inserted_fields(WorkflowStep))
    return f"""
        WITH guard AS (
            SELECT run.id, owner.{_column(username)} AS started_by
            FROM {_quoted(run)} run
            LEFT JOIN {_quoted(user._meta.db_table)} owner ON owner.id = run.started_by_id
            -- A cancelled or suspended run starts nothing new; FOR SHARE holds it so until
            -- this statement commits (a cancel's UPDATE waits) without writing the run row.
            WHERE run.id = %s AND run.status = %s FOR SHARE OF run
        ), claimed AS (
            UPDATE {_quoted(step)}
            SET status = %s, wake_at = NULL, updated_at = CLOCK_TIMESTAMP(),
                lease_expires_at = CLOCK_TIMESTAMP() + make_interval(secs => %s)
            -- Only a first claim of this attempt; waits on a row another claim holds, then
            -- re-checks the status (a second claimer of the same attempt matches nothing).
            WHERE run_id = (SELECT id FROM guard) AND step_key = %s AND status = ANY(%s)
                AND function_name = ANY(%s)
            RETURNING *
        ), history AS (
            UPDATE {_quoted(history)} SET status = %s, running_at = %s
            WHERE step_id = (SELECT id FROM claimed) AND attempt = (SELECT attempt FROM claimed)
            RETURNING 1
        )
        SELECT {returned}, (SELECT started_by FROM guard) AS started_by_name,
            (SELECT count(*) FROM history) AS history_found
        FROM claimed
    """


def claim_fresh_step(
    run_id: Any,
    step_key: str,
    sources: list[str],
    function_names: list[str],
    lease_seconds: float,
    running_at: Any,
) -> WorkflowStep | None:
    """Move a pending or scheduled step of a running run to running, in one statement.

    The step comes back as a model instance with `started_by_name` and `history_found`
    attributes; None when nothing matched (the caller's general claim decides why).
    """
    from ..status import StepStatus

    params = [
        run_id,
        RunStatus.RUNNING,
        StepStatus.RUNNING,
        lease_seconds,
        step_key,
        sources,
        function_names,
        StepStatus.RUNNING,
        _field(WorkflowStepHistory, "running_at").get_db_prep_save(running_at, connection),
    ]
    return next(iter(WorkflowStep.objects.raw(_claim_fresh_step_sql(), params)), None)
