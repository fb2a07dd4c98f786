"""The figures the admin's dashboard draws, over a window that ends now: runs started and
finished per interval, failure rate by workflow, step durations (p50, p95) by function, queue
lag per interval, and pending approvals by age. Grouped queries; nothing per run."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import connection, models
from django.db.models import Count, F, Max, Q
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from ..models import WorkflowApproval, WorkflowRun, WorkflowStepHistory
from ..status import TERMINAL_RUN_STATUSES, RunStatus, StepDispatch


@dataclass(frozen=True)
class Window:
    """How far back the dashboard looks and the interval its time charts count by."""

    name: str
    span: timedelta
    interval: str  # a `Trunc` kind: minute, hour, day

    def start(self, now: datetime) -> datetime:
        return now - self.span

    def buckets(self, now: datetime) -> list[datetime]:
        """Every interval's start from the window's start to now, in the current time zone."""
        step = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}.get(
            self.interval, timedelta(days=1)
        )
        first = _truncated(timezone.localtime(self.start(now)), self.interval)
        return list(_stepping(first, timezone.localtime(now), step))


WINDOWS = {
    window.name: window
    for window in (
        Window("1h", timedelta(hours=1), "minute"),
        Window("24h", timedelta(hours=24), "hour"),
        Window("7d", timedelta(days=7), "day"),
        Window("30d", timedelta(days=30), "day"),
    )
}
DEFAULT_WINDOW = "24h"

# Pending approvals are counted by how long they have waited: (label, at least, less than).
APPROVAL_AGES = (
    ("< 1 h", timedelta(0), timedelta(hours=1)),
    ("1-4 h", timedelta(hours=1), timedelta(hours=4)),
    ("4-24 h", timedelta(hours=4), timedelta(days=1)),
    ("1-7 d", timedelta(days=1), timedelta(days=7)),
    ("> 7 d", timedelta(days=7), None),
)


def _truncated(moment: datetime, interval: str) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    if interval in ("hour", "day"):
        moment = moment.replace(minute=0)
    if interval == "day":
        moment = moment.replace(hour=0)
    return moment


def _stepping(first: datetime, last: datetime, step: timedelta) -> Iterator[datetime]:
    moment = first
    while moment <= last:
        yield moment
        moment = timezone.localtime(moment + step)


def runs_started(window: Window, now: datetime) -> dict[datetime, int]:
    """Runs created per interval."""
    rows = (
        WorkflowRun.objects.filter(created_at__gte=window.start(now))
        .order_by()
        .values_list(Trunc("created_at", window.interval))
        .annotate(n=Count("*"))
    )
    return dict(rows)


def ended_runs(window: Window, now: datetime) -> list[tuple[datetime, str, str, int]]:
    """(interval, status, workflow, runs) of the runs that ended in the window: one read of the
    index of finish time (status and workflow included, so no run row is read), which both
    charts of ended runs draw from."""
    rows = (
        WorkflowRun.objects.filter(finished_at__gte=window.start(now))
        .order_by()
        .values_list(Trunc("finished_at", window.interval), "status", "workflow")
        .annotate(n=Count("*"))
    )
    return list(rows)


def runs_finished(ended: list[tuple[datetime, str, str, int]]) -> dict[datetime, dict[str, int]]:
    """Runs ended per interval, by how they ended (of `ended_runs`)."""
    counts: dict[datetime, dict[str, int]] = {}
    for bucket, status, _, n in ended:
        by_status = counts.setdefault(bucket, {})
        by_status[status] = by_status.get(status, 0) + n
    return counts


def failure_rates(ended: list[tuple[datetime, str, str, int]]) -> list[tuple[str, int, int]]:
    """(workflow, failed, ended) of the runs that ended in the window (of `ended_runs`), worst
    rate first."""
    totals: dict[str, tuple[int, int]] = {}
    for _, status, workflow, n in ended:
        if status in TERMINAL_RUN_STATUSES:
            failed, all_ended = totals.get(workflow, (0, 0))
            totals[workflow] = (failed + (n if status == RunStatus.FAILED else 0), all_ended + n)
    rows = [(workflow, failed, all_ended) for workflow, (failed, all_ended) in totals.items()]
    return sorted(rows, key=lambda row: (-row[1] / row[2], row[0]))


def _ended_attempts(window: Window, now: datetime) -> Any:
    return WorkflowStepHistory.objects.filter(
        running_at__gte=window.start(now), function_name__isnull=False
    ).annotate(duration=Coalesce("succeeded_at", "failed_at") - F("running_at"))


class _Percentiles(models.Aggregate):
    """PostgreSQL's percentile_cont of several fractions at once: one sort of each group's
    durations for all of them."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fractions)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = ArrayField(models.DurationField())


def step_durations(window: Window, now: datetime) -> list[tuple[str, float, float]]:
    """(function, p50 seconds, p95 seconds) of the attempts that started in the window and
    ended, slowest p95 first."""
    attempts = _ended_attempts(window, now).filter(duration__isnull=False).order_by()
    if connection.vendor == "postgresql":
        rows = attempts.values_list("function_name").annotate(
            p50_p95=_Percentiles("duration", fractions="ARRAY[0.5, 0.95]")
        )
        found = [(name, p50.total_seconds(), p95.total_seconds()) for name, (p50, p95) in rows]
    else:
        found = _percentiles_in_python(attempts.values_list("function_name", "duration"))
    return sorted(found, key=lambda row: (-row[2], row[0]))


def _percentiles_in_python(rows: Any) -> list[tuple[str, float, float]]:
    durations: dict[str, list[float]] = {}
    for name, duration in rows:
        durations.setdefault(name, []).append(duration.total_seconds())
    return [
        (name, percentile(values, 0.5), percentile(values, 0.95))
        for name, values in durations.items()
    ]


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` percentile of `values`, interpolated as PostgreSQL's percentile_cont."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def queue_lag(window: Window, now: datetime) -> dict[datetime, float]:
    """The longest wait, in seconds, from an attempt being queued to a worker starting it, per
    interval, of the attempts that went through the queue."""
    waited = F("running_at") - Coalesce("scheduled_at", "created_at")
    rows = (
        WorkflowStepHistory.objects.filter(
            running_at__gte=window.start(now), dispatch=StepDispatch.QUEUED
        )
        .order_by()
        .values_list(Trunc("running_at", window.interval))
        .annotate(longest=Max(waited))
    )
    return {bucket: max(longest.total_seconds(), 0.0) for bucket, longest in rows}


def approvals_by_age(now: datetime) -> list[tuple[str, int]]:
    """(age band, pending approvals that have waited that long) for every band of APPROVAL_AGES."""
    bands = {}
    for number, (_, at_least, less_than) in enumerate(APPROVAL_AGES):
        band = Q(created_at__lte=now - at_least)
        if less_than is not None:
            band &= Q(created_at__gt=now - less_than)
        bands[f"band_{number}"] = Count("pk", filter=band)
    counts = WorkflowApproval.objects.pending().aggregate(**bands)
    return [(label, counts[f"band_{n}"]) for n, (label, _, _) in enumerate(APPROVAL_AGES)]
