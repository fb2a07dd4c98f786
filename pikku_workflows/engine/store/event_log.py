"""The event log: every timeline event of a run, append-only, read in seq order.

Rows are written by database triggers on the history and audit tables (installed by the
migration that created the table), so every path that records an attempt's move or an operator
action writes its events in the same statement. `seq` is gapless per run and in commit order,
`at` is the database clock at that commit (architecture §14).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F, Max

from ...models import WorkflowEvent
from ...sql import Statements

STATEMENTS = Statements(Path(__file__).with_name("event_log.sql"), names=dict)
EVENT_COLUMNS = ("seq", "at", "step_key", "attempt", "event")


def number_own_events() -> None:
    """Inside a transaction on PostgreSQL, number the events it wrote so far (elsewhere every
    event a reader can see is numbered already)."""
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["number_own_events"])


def read_events(run_id: Any, after: int = -1) -> list[dict[str, Any]]:
    """The run's events with a seq above `after`, in seq order, operator actions with the
    username of who acted (`user`)."""
    number_own_events()
    username = f"user__{get_user_model().USERNAME_FIELD}"
    rows = WorkflowEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")
    return [
        {**row, "user": row.pop("username")}
        for row in rows.values(*EVENT_COLUMNS, username=F(username))
    ]


def last_seq(run_id: Any) -> int:
    """The run's last event's seq; -1 before its first event."""
    number_own_events()
    last = WorkflowEvent.objects.filter(run_id=run_id).aggregate(last=Max("seq"))["last"]
    return -1 if last is None else last
