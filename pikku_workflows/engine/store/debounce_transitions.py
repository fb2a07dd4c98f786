"""Debounce windows: a start of a workflow with a debounce rule joins the queued run its key's
window holds (the latest start's input wins, its not_before moves on, the join is audited), in
one statement (`debounce_transitions.sql`). The start that finds no window open opens one: its
run is inserted queued (`run_rows`), and the timer loop admits it when its not_before comes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from ...flow import Debounce, run_debounce_key
from ...models import WorkflowAuditEntry, WorkflowRun
from ...querysets import DatabaseNow
from ...registry import registry
from ...sql import Statements
from ...status import RunStatus
from .tables import engine_names

STATEMENTS = Statements(Path(__file__).with_name("debounce_transitions.sql"), names=engine_names)
# The audit action (and timeline event) of a start that joined a debounced run.
JOINED = "debounced"
JOINED_REASON = "a start with the same debounce key joined this run: its input is the run's now"
# What a joining start replaces: the run is as its latest start made it, but for its id, its
# creation time and its window.
JOINED_FIELDS = (
    "input",
    "idempotency_key",
    "idempotency_scope",
    "started_by",
    "subject_type",
    "subject_id",
    "traceparent",
    "priority",
    "concurrency_key",
)


@dataclass(frozen=True)
class Debouncing:
    """What debounces a start: its workflow's rule and the key it gave the start's input."""

    workflow: str
    key: str
    rule: Debounce


def debouncing_for(workflow: str, input: Any) -> Debouncing | None:
    """The debouncing of a start of `workflow` with `input`, None when it has no rule;
    InvalidInput when its key function raises or gives no usable key."""
    rule = registry.get_workflow(workflow).debounce
    if rule is None:
        return None
    return Debouncing(workflow, run_debounce_key(rule, workflow, input), rule)


def join_debounced_run(debouncing: Debouncing, start: WorkflowRun) -> Any:
    """The id of the queued run `debouncing`'s window holds, made `start`'s (the unsaved run
    this start would insert: its JOINED_FIELDS); None when no window of the key is open."""
    if connection.vendor == "postgresql":
        params = dict(_column_value(start, field) for field in JOINED_FIELDS)
        params |= {
            "workflow": debouncing.workflow,
            "debounce_key": debouncing.key,
            "quiet_ms": debouncing.rule.quiet_ms,
            "run_queued": RunStatus.QUEUED,
            "action": JOINED,
            "reason": JOINED_REASON,
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["join_debounced_run"], params)
            row = cursor.fetchone()
        return None if row is None else row[0]
    return _join_with_the_orm(debouncing, start)


def _column_value(run: WorkflowRun, name: str) -> tuple[str, Any]:
    """The field's column and its value as the ORM would write it."""
    field = WorkflowRun._meta.get_field(name)
    assert isinstance(field, Field) and field.column is not None
    return field.column, field.get_db_prep_save(getattr(run, field.attname), connection)


def _join_with_the_orm(debouncing: Debouncing, start: WorkflowRun) -> Any:
    # SQLite (one writer at a time): the statement's arithmetic on this process's clock.
    with transaction.atomic():
        window = WorkflowRun.objects.filter(
            workflow=debouncing.workflow, debounce_key=debouncing.key, status=RunStatus.QUEUED
        ).first()
        if window is None:
            return None
        moved = timezone.now() + timedelta(milliseconds=debouncing.rule.quiet_ms)
        if window.debounce_deadline is not None:
            moved = min(moved, window.debounce_deadline)
        not_before = max(moved, window.not_before) if window.not_before else moved
        changes = {field: getattr(start, field) for field in JOINED_FIELDS}
        WorkflowRun.objects.filter(pk=window.pk).update(
            **changes, not_before=not_before, updated_at=DatabaseNow()
        )
        WorkflowAuditEntry.objects.create(
            run_id=window.pk,
            action=JOINED,
            user_id=start.started_by_id,
            reason=JOINED_REASON,
            payload={
                "status_before": RunStatus.QUEUED,
                "status_after": RunStatus.QUEUED,
                "key": debouncing.key,
                "not_before": not_before.isoformat(),
            },
        )
        return window.pk
