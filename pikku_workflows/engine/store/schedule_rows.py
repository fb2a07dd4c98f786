"""Schedule rows: a checked definition written to its row, its ticks (one per nominal time:
a second is refused by the unique key), and the schedule audit trail."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

from django.db import IntegrityError, connection, transaction

from ...dispatch import queue_fragments, run_messages_params
from ...models import WorkflowSchedule, WorkflowScheduleAuditEntry, WorkflowScheduleTick
from ...observability.instruments import record_fire_delay_after_commit
from ...schedules.fire_times import fire_times
from ...schedules.jitter import jitter_delay
from ...schedules.spec import ScheduleSpec, parse_schedule
from ...sql import Statements, quoted_table
from .run_rows import announce_runs_started, run_rows_json
from .tables import engine_names
from .transitions import on_postgresql

ONE_MICROSECOND = timedelta(microseconds=1)


def definition_columns(spec: ScheduleSpec) -> dict[str, Any]:
    """The row's columns that hold the definition."""
    return {
        "workflow": spec.workflow,
        "input": spec.input,
        "cron": spec.cron,
        "every_ms": spec.every_ms,
        "timezone": spec.timezone,
        "start_at": spec.start_at,
        "end_at": spec.end_at,
        "overlap": spec.overlap,
        "catch_up": spec.catch_up,
        "catch_up_window_ms": spec.catch_up_window_ms,
        "catch_up_max": spec.catch_up_max,
        "jitter_ms": spec.jitter_ms,
        "pause_on_failure": spec.pause_on_failure,
    }


def spec_of(schedule: WorkflowSchedule) -> ScheduleSpec:
    """The row's definition, checked as any other (the row holds only checked values)."""
    fields = {
        "cron": schedule.cron,
        "every": schedule.every_ms,
        "timezone": schedule.timezone,
        "input": schedule.input,
        "overlap": schedule.overlap,
        "catch_up": schedule.catch_up,
        "catch_up_window": schedule.catch_up_window_ms,
        "catch_up_max": schedule.catch_up_max,
        "jitter": schedule.jitter_ms,
        "start_at": schedule.start_at,
        "end_at": schedule.end_at,
        "paused": schedule.paused,
        "pause_on_failure": schedule.pause_on_failure,
    }
    return parse_schedule(schedule.name, schedule.workflow, fields)


def comparable_definition(spec: ScheduleSpec) -> dict[str, Any]:
    """The definition as JSON (what `code_definition` keeps, and what "code differs" compares)."""
    columns = definition_columns(spec)
    for moment in ("start_at", "end_at"):
        if columns[moment] is not None:
            columns[moment] = columns[moment].isoformat()
    return columns


def next_tick(spec: ScheduleSpec, after: datetime) -> tuple[datetime | None, datetime | None]:
    """The nominal time of the first tick after `after`, and when it fires (with its jitter);
    (None, None) when no tick is left before end_at."""
    nominal = next(islice(fire_times(spec.rule, after), 1), None)
    if nominal is None:
        return None, None
    return nominal, nominal + jitter_delay(spec.name, nominal, spec.jitter_ms)


def write_tick_txn(
    schedule: WorkflowSchedule,
    nominal_at: datetime,
    fired_at: datetime,
    outcome: str,
    *,
    reason: str = "",
    backfill: Any = None,
    run_id: Any = None,
) -> Any:
    """Inside a transaction: the id of the new tick of `schedule` at `nominal_at` (with the run
    `run_id` it starts, inserted later in the same transaction: the key is checked at commit),
    or None when that nominal time has one already (a backfill wrote it, or another firing
    did): it does not fire again."""
    assert transaction.get_connection().in_atomic_block
    if on_postgresql():
        params = {
            "schedule_id": schedule.pk,
            "nominal_at": nominal_at,
            "fired_at": fired_at,
            "outcome": outcome,
            "run_id": run_id,
            "backfill_id": getattr(backfill, "pk", backfill),
            "reason": reason,
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["insert_tick"], params)
            row = cursor.fetchone()
        return row[0] if row else None
    try:
        # A savepoint, so a refused duplicate leaves the firing's transaction usable.
        with transaction.atomic():
            return WorkflowScheduleTick.objects.create(
                schedule=schedule,
                nominal_at=nominal_at,
                fired_at=fired_at,
                outcome=outcome,
                reason=reason,
                backfill=backfill,
                run_id=run_id,
            ).pk
    except IntegrityError:
        return None


def set_tick_run(tick_id: Any, run_id: Any, outcome: str, reason: str = "") -> None:
    WorkflowScheduleTick.objects.filter(pk=tick_id).update(
        run_id=run_id, outcome=outcome, reason=reason
    )


def write_fired_ticks_txn(ticks: list[dict[str, Any]], runs: list[dict[str, Any]]) -> int:
    """Inside a transaction, on PostgreSQL with the queue in the engine's database: a batch of
    firings' ticks (`insert_tick`'s parameters each), and the runs they start (`run_rows_json`'s
    keyword arguments each, `id` the tick's `run_id`) with their messages, in one statement;
    a tick whose nominal time has one already is not written, nor its run. Returns how many
    runs were started."""
    assert transaction.get_connection().in_atomic_block
    run_params, built = run_rows_json(runs)
    params = {
        "ticks": json.dumps(ticks, default=_json_value),
        **run_params,
        **run_messages_params([run["id"] for run in runs]),
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["insert_fired_ticks"], params)
        started = {row[0] for row in cursor.fetchall()}
    announce_runs_started(built, started)
    for tick in ticks:
        if tick["run_id"] in started:
            record_fire_delay_after_commit((tick["fired_at"] - tick["nominal_at"]).total_seconds())
    return len(started)


def _json_value(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def schedule_names() -> dict[str, str]:
    return {**engine_names(), "tick": quoted_table(WorkflowScheduleTick)}


STATEMENTS = Statements(
    Path(__file__).with_name("schedule_rows.sql"), names=schedule_names, fragments=queue_fragments
)


def audit_schedule(
    schedule: WorkflowSchedule | None,
    name: str,
    action: str,
    *,
    user: Any = None,
    note: str = "",
    payload: dict[str, Any] | None = None,
) -> None:
    WorkflowScheduleAuditEntry.objects.create(
        schedule=schedule,
        schedule_name=name,
        action=action,
        user=user,
        note=note,
        payload=payload or {},
    )
