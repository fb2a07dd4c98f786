"""Named limits' and step functions' rates on the database clock: GCRA per (limit, key) in one
statement (`rate_transitions.sql`), which says when a start or a step attempt may begin; an
attempt held until then; a key closed by `pw.RateLimited`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ...flow import Limit, parse_rate, rate_rule, schedule_start, step_rate_key
from ...models import WorkflowLimit, WorkflowRate, WorkflowStep
from ...registry import StepFunctionDefinition, registry
from ...sql import Statements
from ...status import StepStatus
from ...waiting import AdmissionReason
from .step_transitions import move_step_txn
from .tables import engine_names

STATEMENTS = Statements(Path(__file__).with_name("rate_transitions.sql"), names=engine_names)


@dataclass(frozen=True)
class RateTime:
    """When one start under a limit's key may begin, and how far ahead of now that is."""

    begins: datetime
    seconds_ahead: float

    @property
    def held(self) -> bool:
        return self.seconds_ahead > 0


def start_time(workflow: str) -> datetime | None:
    """When a new run of `workflow` may begin under the rates of the limits it names (one
    statement per limit; LimitNotFound for a name no limit has): None without limits; a time
    already past means at once."""
    names = registry.get_workflow(workflow).limits
    limits = [registry.get_limit(name, workflow) for name in names]
    times = [take_rate(limit).begins for limit in limits if limit.rate is not None]
    return max(times) if times else None


def holding_limit(workflow: str) -> str | None:
    """Of the limits with a rate `workflow` names, the one whose rate holds starts furthest
    ahead now (what a queued run of it waits on); None when it names none."""
    definition = registry.workflows.get(workflow)
    names = [] if definition is None else list(definition.limits)
    rows = WorkflowRate.objects.filter(limit_name__in=names, key="").order_by("-tat")
    return rows.values_list("limit_name", flat=True).first()


def attempt_rate_keys(definition: StepFunctionDefinition, data: Any) -> list[tuple[Limit, str]]:
    """The (limit, key) pairs an attempt of `definition` on `data` is spaced under: each named
    limit with a rate (its one key) and the function's own rate (its key from the data). LimitNotFound for
    a limit nobody defined, InvalidInput for a key function that fails on `data`."""
    limits = [registry.get_limit(name, definition.name) for name in definition.limits]
    keys = [(limit, "") for limit in limits if limit.rate is not None]
    own = definition.rate
    if own is not None:
        limit = Limit(rate_rule(definition.name), own.rate, own.parsed)
        keys.append((limit, step_rate_key(own, data, definition.name)))
    return keys


def hold_attempt_txn(step: WorkflowStep, keys: list[tuple[Limit, str]]) -> RateTime | None:
    """Inside the claim's transaction (the step row locked): take each rate for the attempt
    about to start; when the latest time they give is ahead, hold the step until then instead
    (pending with `not_before` and its timer at that time: the timer loop dispatches it, and
    its claim then starts it without asking the rates again) and return that time; None: the
    attempt may start now."""
    assert transaction.get_connection().in_atomic_block
    times = [(take_rate(limit, key), limit, key) for limit, key in keys]
    if not times:
        return None
    latest, limit, key = max(times, key=lambda item: item[0].seconds_ahead)
    if not latest.held:
        return None
    hold: dict[str, Any] = {
        "not_before": latest.begins,
        "wake_at": latest.begins,
        "admission_hold": {"reason": AdmissionReason.RATE.value, "limit": limit.name, "key": key},
    }
    if step.status == StepStatus.SCHEDULED:
        # Its message was spent on this claim: the timer loop sends the next one when due.
        move_step_txn(step, StepStatus.PENDING, expected=[StepStatus.SCHEDULED], **hold)
    else:
        WorkflowStep.objects.filter(pk=step.pk, attempt=step.attempt).update(**hold)
        for name, value in hold.items():
            setattr(step, name, value)
    return latest


def take_rate(limit: Limit, key: str = "") -> RateTime:
    """GCRA for one start under `limit` and `key`: when it may begin (database clock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["take_rate"], _rate_params(limit, key))
            begins, seconds_ahead = cursor.fetchone()
            return RateTime(begins, float(seconds_ahead))
    return _take_rate_with_the_orm(limit, key)


def close_rate(limit: Limit, key: str, seconds: float) -> None:
    """Close `limit`'s `key` for `seconds` from now (an upstream said so: `pw.RateLimited`):
    the next start under it begins then at the earliest, the ones after it at the rate."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                STATEMENTS["close_rate"], {**_rate_params(limit, key), "seconds": seconds}
            )
        return
    rate = _applied_rate(limit)
    until = timezone.now() + timedelta(seconds=seconds, milliseconds=rate.tolerance_ms)
    current = WorkflowRate.objects.filter(limit_name=limit.name, key=key).first()
    if current is None or current.tat < until:
        WorkflowRate.objects.update_or_create(
            limit_name=limit.name, key=key, defaults={"tat": until}
        )


def _rate_params(limit: Limit, key: str) -> dict[str, Any]:
    assert limit.rate is not None  # only limits with a rate are taken
    return {
        "limit_name": limit.name,
        "key": key,
        "count": limit.rate.count,
        "period_ms": limit.rate.period_ms,
        "burst": limit.rate.burst,
        "edited": WorkflowLimit.ManagedBy.ADMIN,
    }


def _applied_rate(limit: Limit) -> Any:
    rows = WorkflowLimit.objects.filter(
        name=limit.name, managed_by=WorkflowLimit.ManagedBy.ADMIN
    ).exclude(rate="")
    edited = rows.values("rate", "burst").first()
    return parse_rate(edited["rate"], burst=edited["burst"]) if edited else limit.rate


def _take_rate_with_the_orm(limit: Limit, key: str) -> RateTime:
    # SQLite (one writer at a time, no clock of its own worth the name): the statement's
    # arithmetic on this process's clock.
    rate = _applied_rate(limit)
    with transaction.atomic():
        current = WorkflowRate.objects.filter(limit_name=limit.name, key=key).first()
        now_ms = timezone.now().timestamp() * 1000
        begins, tat = schedule_start(
            rate, current.tat.timestamp() * 1000 if current else None, now_ms
        )
        WorkflowRate.objects.update_or_create(
            limit_name=limit.name, key=key, defaults={"tat": _moment(tat)}
        )
    return RateTime(_moment(max(begins, now_ms)), (begins - now_ms) / 1000)


def _moment(milliseconds: float) -> datetime:
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)
