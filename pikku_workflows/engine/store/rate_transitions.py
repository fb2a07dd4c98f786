"""Named limits' rates on the database clock: GCRA per (limit, key) in one statement
(`rate_transitions.sql`), which says when a start may begin."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ...flow import Limit, parse_rate, schedule_start
from ...models import WorkflowLimit, WorkflowRate
from ...registry import registry
from ...sql import Statements
from .tables import engine_names

STATEMENTS = Statements(Path(__file__).with_name("rate_transitions.sql"), names=engine_names)


def start_time(workflow: str) -> datetime | None:
    """When a new run of `workflow` may begin under the rates of the limits it names (one
    statement per limit; LimitNotFound for a name no limit has): None without limits; a time
    already past means at once."""
    names = registry.get_workflow(workflow).limits
    limits = [registry.get_limit(name, workflow) for name in names]
    times = [take_rate(limit) for limit in limits]
    return max(times) if times else None


def take_rate(limit: Limit, key: str = "") -> datetime:
    """GCRA for one start under `limit` and `key`: when it may begin (database clock)."""
    if connection.vendor == "postgresql":
        params: dict[str, Any] = {
            "limit_name": limit.name,
            "key": key,
            "count": limit.rate.count,
            "period_ms": limit.rate.period_ms,
            "burst": limit.rate.burst,
            "edited": WorkflowLimit.ManagedBy.ADMIN,
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["take_rate"], params)
            (begins,) = cursor.fetchone()
            return begins
    return _take_rate_with_the_orm(limit, key)


def _take_rate_with_the_orm(limit: Limit, key: str) -> datetime:
    # SQLite (one writer at a time, no clock of its own worth the name): the statement's
    # arithmetic on this process's clock.
    rows = WorkflowLimit.objects.filter(name=limit.name, managed_by=WorkflowLimit.ManagedBy.ADMIN)
    edited = rows.values("rate", "burst").first()
    rate = parse_rate(edited["rate"], burst=edited["burst"]) if edited else limit.rate
    with transaction.atomic():
        current = WorkflowRate.objects.filter(limit_name=limit.name, key=key).first()
        now_ms = timezone.now().timestamp() * 1000
        begins, tat = schedule_start(
            rate, current.tat.timestamp() * 1000 if current else None, now_ms
        )
        WorkflowRate.objects.update_or_create(
            limit_name=limit.name, key=key, defaults={"tat": _moment(tat)}
        )
    return _moment(max(begins, now_ms))


def _moment(milliseconds: float) -> datetime:
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)
