"""A schedule's moves (paused and resumed, advanced to its next tick, paused by a failed run)
and a backfill's status changes: each one guarded write."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection

from ...exceptions import InvalidTransition
from ...models import WorkflowBackfill, WorkflowRun, WorkflowSchedule
from ...querysets import DatabaseNow
from ...schedules.choices import BackfillStatus
from ...sql import Statements, quoted_table

# The moves a backfill may make: only a running one ends.
BACKFILL_SOURCES = {
    BackfillStatus.COMPLETED: (BackfillStatus.RUNNING,),
    BackfillStatus.CANCELLED: (BackfillStatus.RUNNING,),
}


def advance_schedule(schedule_id: Any, **fields: Any) -> None:
    """Write the schedule's next tick and what its last firing did (`next_nominal_at`,
    `next_fire_at`, `last_fired_at`, `last_outcome`, `skipped_in_a_row`)."""
    WorkflowSchedule.objects.filter(pk=schedule_id).update(updated_at=DatabaseNow(), **fields)


def advance_schedules(advances: dict[Any, dict[str, Any]]) -> None:
    """`advance_schedule` for many schedules in one statement (`schedule_transitions.sql`):
    `advances` maps each schedule's id to those fields, all of them."""
    if not advances:
        return
    rows = [{"id": pk, **fields} for pk, fields in advances.items()]
    with connection.cursor() as cursor:
        cursor.execute(
            STATEMENTS["advance_schedules"], {"advances": json.dumps(rows, default=_iso)}
        )


def _iso(value: Any) -> str:
    assert isinstance(value, datetime)
    return value.isoformat()


STATEMENTS = Statements(
    Path(__file__).with_name("schedule_transitions.sql"),
    names=lambda: {"schedule": quoted_table(WorkflowSchedule)},
)


def set_paused(schedule_id: Any, paused: bool, note: str = "", **fields: Any) -> bool:
    """Pause (with `note`) or resume the schedule; False when it already was."""
    changed = WorkflowSchedule.objects.filter(pk=schedule_id, paused=not paused).update(
        paused=paused, pause_note=note if paused else "", updated_at=DatabaseNow(), **fields
    )
    return bool(changed)


def pause_for_failed_run(run_id: Any) -> None:
    """Pause the schedule that started the failed run `run_id`, if it pauses on failure; the
    note names the run."""
    schedule = WorkflowRun.objects.filter(pk=run_id).values("schedule_id")
    WorkflowSchedule.objects.filter(pk__in=schedule, pause_on_failure=True, paused=False).update(
        paused=True, pause_note=f"Paused: run {run_id} failed.", updated_at=DatabaseNow()
    )


def move_backfill(backfill_id: Any, target: str, **fields: Any) -> None:
    """Move a running backfill to `target` (completed or cancelled)."""
    sources = BACKFILL_SOURCES[BackfillStatus(target)]
    moved = WorkflowBackfill.objects.filter(pk=backfill_id, status__in=sources).update(
        status=target, finished_at=DatabaseNow(), **fields
    )
    if not moved:
        current = WorkflowBackfill.objects.filter(pk=backfill_id).values_list("status", flat=True)
        raise InvalidTransition("backfill", current.first(), target)
