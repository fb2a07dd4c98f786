"""Schedules for tests: a workflow to start, the database clock, and a schedule made due by
moving its next tick back (what a timer loop that was down, or a wait, would leave)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick

MINUTE = timedelta(minutes=1)


def register_report(name: str = "report", body: Any = None) -> str:
    """Register the workflow `name` (its body returns the tick's nominal time by default)."""

    def report(wf: pw.Workflow, input: Any) -> Any:
        if body is not None:
            return body(wf, input)
        return {"scheduled_for": wf.scheduled_for.isoformat() if wf.scheduled_for else None}

    pw.workflow(name)(report)
    return name


def database_now() -> datetime:
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def make_due(name: str, *, minutes_ago: int = 0) -> datetime:
    """Move the every-minute schedule `name`'s next tick to the minute `minutes_ago` before the
    current one (due now); returns that nominal time."""
    nominal = minute_floor(database_now()) - minutes_ago * MINUTE
    WorkflowSchedule.objects.filter(name=name).update(next_nominal_at=nominal, next_fire_at=nominal)
    return nominal


def ticks(name: str) -> list[tuple[datetime, str]]:
    rows = WorkflowScheduleTick.objects.filter(schedule__name=name).order_by("nominal_at")
    return list(rows.values_list("nominal_at", "outcome"))


def runs_of(name: str) -> list[WorkflowRun]:
    return list(WorkflowRun.objects.filter(schedule__name=name).order_by("scheduled_for"))
