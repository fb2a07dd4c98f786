"""Single-statement PostgreSQL forms of the two writes every step makes (create, record).

The ORM forms in `transitions` are the reference; these issue the same rows in one round trip
each (measured: the ORM's own CPU cost per step exceeded the database's). Values are adapted
by the model fields themselves (`get_db_prep_save`), so they are stored exactly as the ORM would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from ..models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from ..status import RunStatus


def plain(fields: dict[str, Any]) -> bool:
    """True when no value is a database expression (those need the ORM's compiler)."""
    return not any(hasattr(value, "resolve_expression") for value in fields.values())


def _column_values(instance: Model, skip: Iterable[str] = ()) -> tuple[list[str], list[Any]]:
    """Columns and adapted values of `instance` as an INSERT would write them, each cast."""
    columns, values = [], []
    for field in instance._meta.concrete_fields:
        if field.name in skip or (field.primary_key and getattr(instance, field.attname) is None):
            continue
        columns.append(_quoted_column(field))
        values.append(field.get_db_prep_save(field.pre_save(instance, add=True), connection))
    return columns, values


def _quoted_column(field: Field) -> str:
    assert field.column is not None  # concrete fields always have one
    return connection.ops.quote_name(field.column)


def _casts(instance: Model, skip: Iterable[str] = ()) -> list[str]:
    return [
        f"%s::{field.db_type(connection)}"
        for field in instance._meta.concrete_fields
        if field.name not in skip
        and not (field.primary_key and getattr(instance, field.attname) is None)
    ]


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
    step_columns, step_values = _column_values(step)  # stamps step.created_at
    stamp_first_attempt(history, step)
    history_columns, history_values = _column_values(history, skip=("step",))
    run_table = connection.ops.quote_name(WorkflowRun._meta.db_table)
    sql = f"""
        WITH guard AS (
            SELECT 1 FROM {run_table}
            WHERE id = %s AND status = %s AND lease_holder = %s FOR SHARE
        ), new_step AS (
            INSERT INTO {connection.ops.quote_name(WorkflowStep._meta.db_table)}
                ({", ".join(step_columns)})
            SELECT {", ".join(_casts(step))} FROM guard RETURNING id
        )
        INSERT INTO {connection.ops.quote_name(WorkflowStepHistory._meta.db_table)}
            (step_id, {", ".join(history_columns)})
        SELECT new_step.id, {", ".join(_casts(history, skip=("step",)))} FROM new_step
        RETURNING step_id
    """
    params = [run_id, RunStatus.RUNNING, lease_holder, *step_values, *history_values]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def update_step_fenced(
    step: WorkflowStep,
    sources: Iterable[str],
    step_changes: dict[str, Any],
    history_changes: dict[str, Any],
) -> tuple[bool, bool]:
    """Update the step (guarded by its attempt and status) and that attempt's history row.

    Returns (step moved, history row found); a missing history row is repaired by the caller.
    """
    step_sets, step_params = _assignments(WorkflowStep, step_changes)
    history_sets, history_params = _assignments(WorkflowStepHistory, history_changes)
    step_table = connection.ops.quote_name(WorkflowStep._meta.db_table)
    history_table = connection.ops.quote_name(WorkflowStepHistory._meta.db_table)
    sql = f"""
        WITH moved AS (
            UPDATE {step_table} SET {step_sets}, updated_at = CLOCK_TIMESTAMP()
            WHERE id = %s AND attempt = %s AND status = ANY(%s) RETURNING id
        ), history AS (
            UPDATE {history_table} SET {history_sets}
            WHERE step_id = (SELECT id FROM moved) AND attempt = %s RETURNING 1
        )
        SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM history)
    """
    params = [
        *step_params,
        step.pk,
        step.attempt,
        list(sources),
        *history_params,
        step.attempt,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        moved, history_found = cursor.fetchone()
    return bool(moved), bool(history_found)


def _assignments(model: type[Model], changes: dict[str, Any]) -> tuple[str, list[Any]]:
    sets, params = [], []
    for name, value in changes.items():
        field = model._meta.get_field(name)
        assert isinstance(field, Field)
        sets.append(f"{_quoted_column(field)} = %s::{field.db_type(connection)}")
        params.append(field.get_db_prep_save(value, connection))
    return ", ".join(sets), params
