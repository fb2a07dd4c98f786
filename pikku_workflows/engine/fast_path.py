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

from ..models import WorkflowRun, WorkflowStep, WorkflowStepHistory
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


@functools.cache
def _insert_step_sql() -> str:
    step_fields = _inserted_fields(WorkflowStep)
    history_fields = _inserted_fields(WorkflowStepHistory, HISTORY_SKIPPED)
    return f"""
        WITH guard AS (
            SELECT 1 FROM {_quoted(WorkflowRun._meta.db_table)}
            WHERE id = %s AND status = %s AND lease_holder = %s FOR SHARE
        ), new_step AS (
            INSERT INTO {_quoted(WorkflowStep._meta.db_table)}
                ({", ".join(_column(f) for f in step_fields)})
            SELECT {", ".join(_cast(f) for f in step_fields)} FROM guard RETURNING id
        )
        INSERT INTO {_quoted(WorkflowStepHistory._meta.db_table)}
            (step_id, {", ".join(_column(f) for f in history_fields)})
        SELECT new_step.id, {", ".join(_cast(f) for f in history_fields)} FROM new_step
        RETURNING step_id
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
    step_values = _insert_values(step, _inserted_fields(WorkflowStep))  # stamps created_at
    stamp_first_attempt(history, step)
    history_values = _insert_values(history, _inserted_fields(WorkflowStepHistory, HISTORY_SKIPPED))
    params = [run_id, RunStatus.RUNNING, lease_holder, *step_values, *history_values]
    with connection.cursor() as cursor:
        cursor.execute(_insert_step_sql(), params)
        return cursor.fetchone() is not None


@functools.cache
def _update_step_sql(step_names: tuple[str, ...], history_names: tuple[str, ...]) -> str:
    return f"""
        WITH moved AS (
            UPDATE {_quoted(WorkflowStep._meta.db_table)}
            SET {_assignments(WorkflowStep, step_names)}, updated_at = CLOCK_TIMESTAMP()
            WHERE id = %s AND attempt = %s AND status = ANY(%s) RETURNING id
        ), history AS (
            UPDATE {_quoted(WorkflowStepHistory._meta.db_table)}
            SET {_assignments(WorkflowStepHistory, history_names)}
            WHERE step_id = (SELECT id FROM moved) AND attempt = %s RETURNING 1
        )
        SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM history)
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
    params = [
        *_update_values(WorkflowStep, step_changes),
        step.pk,
        step.attempt,
        list(sources),
        *_update_values(WorkflowStepHistory, history_changes),
        step.attempt,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        moved, history_found = cursor.fetchone()
    return bool(moved), bool(history_found)


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
