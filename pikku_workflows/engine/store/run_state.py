"""The run's state map (`wf.set_state`, a step's `ctx.set_state`): one key merged at a time, so
concurrent writers of different keys (parallel graph nodes) never lose each other's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists

from ...exceptions import InvalidInput
from ...models import WorkflowRun, WorkflowStep
from ...querysets import DatabaseNow
from ...serialization import NotStorableJson, round_trip
from ...sql import Statements
from ...status import StepStatus
from ...validation import KEY_MAX_LENGTH, checked_text
from .tables import engine_names

STATEMENTS = Statements(Path(__file__).with_name("run_state.sql"), names=engine_names)


def checked_state(key: Any, value: Any) -> Any:
    """The value as it will be stored; a bad key or an unstorable value is InvalidInput."""
    checked_text(key, "A state key", max_length=KEY_MAX_LENGTH)
    try:
        return round_trip(value)
    except NotStorableJson as exc:
        raise InvalidInput(f"State {key!r} is not storable JSON: {exc}") from exc


def merge_run_state(
    run_id: Any,
    key: str,
    value: Any,
    *,
    lease_holder: str | None = None,
    step: WorkflowStep | None = None,
) -> bool:
    """Set one key of the run's state (`value` already checked), fenced by the pass's lease or
    the step's running attempt; False when the fence refused (nothing written)."""
    if connection.vendor == "postgresql":
        return _merge_in_one_statement(run_id, key, value, lease_holder, step)
    runs = WorkflowRun.objects.filter(pk=run_id)
    if lease_holder is not None:
        runs = runs.filter(lease_holder=lease_holder)
    if step is not None:
        attempt = WorkflowStep.objects.filter(
            pk=step.pk, attempt=step.attempt, status=StepStatus.RUNNING
        )
        runs = runs.filter(Exists(attempt))
    # The ORM form reads, then writes: SQLite (transaction_mode IMMEDIATE) takes its one write
    # lock when the transaction begins, so no other writer comes between the two.
    with transaction.atomic():
        state = runs.values_list("state", flat=True).first()
        if state is None and not runs.exists():
            return False
        return bool(runs.update(state={**(state or {}), key: value}, updated_at=DatabaseNow()))


def _merge_in_one_statement(
    run_id: Any, key: str, value: Any, lease_holder: str | None, step: WorkflowStep | None
) -> bool:
    state_field = WorkflowRun._meta.get_field("state")
    params = {
        "run_id": run_id,
        "key": key,
        "value": state_field.get_db_prep_save(value, connection),
        "lease_holder": lease_holder,
        "step_id": step.pk if step is not None else None,
        "attempt": step.attempt if step is not None else None,
        "running": StepStatus.RUNNING,
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["merge_run_state"], params)
        return cursor.fetchone() is not None
