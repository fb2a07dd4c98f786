"""Counters and histograms of committed work through OpenTelemetry metrics (`OTEL`, the `[otel]`
extra): each is recorded once the write that makes its fact true commits, by the process that
wrote it, so a replay (which writes nothing) records nothing and a rolled-back write is never
counted. Labels are names from the code (workflows, functions, queues) and the engine's
statuses, never a run id, a key or a tenant.

Instruments come from the global MeterProvider the host configures (with the reader of its
choice: OTLP, Prometheus, in-memory). Names follow OpenTelemetry's conventions (dotted, a unit,
no unit or `_total` in the name); a Prometheus exporter writes them as the names in NAMES."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction

from ..conf import pikku_settings

logger = logging.getLogger(__name__)

METER_NAME = "pikku_workflows"

# Bucket bounds (seconds) for durations from a few milliseconds to an hour.
SECONDS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip

# Each instrument by its OpenTelemetry name: (the name Prometheus gives it, unit, labels,
# meaning); those in seconds are histograms, the others counters.
# docs/observability.md lists the same.
NAMES: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "pikku.runs.finished": (
        "pikku_runs_finished_total",
        "{run}",
        ("workflow", "status"),
        "Runs that ended (completed, failed, cancelled), by workflow and status.",
    ),
    "pikku.step.duration": (
        "pikku_step_duration_seconds",
        "s",
        ("function", "dispatch"),
        "Step attempts from start to end, by step function and how they ran.",
    ),
    "pikku.step.schedule_to_start": (
        "pikku_step_schedule_to_start_seconds",
        "s",
        ("queue",),
        "From a queued attempt being queued to a worker starting it, by django-q2 cluster.",
    ),
    "pikku.pass.replay": (
        "pikku_pass_replay_seconds",
        "s",
        ("workflow",),
        "Orchestrator passes from the lease taken to the pass's last write, by workflow.",
    ),
    "pikku.lease.expired": (
        "pikku_lease_expired_total",
        "{lease}",
        (),
        "Step attempts whose lease lapsed (their worker went silent), ended by another process.",
    ),
    "pikku.schedule.fire_delay": (
        "pikku_schedule_fire_delay_seconds",
        "s",
        (),
        "From a schedule's nominal time to the timer loop starting its run.",
    ),
}


def metrics_on() -> bool:
    """`OTEL` is true and the OpenTelemetry SDK is installed (the setting that turns tracing on
    turns these on too)."""
    return bool(pikku_settings.OTEL) and _sdk_installed()


@functools.cache
def _sdk_installed() -> bool:
    try:
        import opentelemetry.sdk.metrics  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _instruments() -> dict[str, Any]:
    """Every instrument of NAMES, made once from the global MeterProvider (a proxy until the
    host sets one: instruments made before then record into it once it is set)."""
    from opentelemetry import metrics

    meter = metrics.get_meter(METER_NAME)
    made: dict[str, Any] = {}
    for name, (_, unit, _, meaning) in NAMES.items():
        if unit == "s":
            made[name] = meter.create_histogram(
                name,
                unit=unit,
                description=meaning,
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            )
        else:
            made[name] = meter.create_counter(name, unit=unit, description=meaning)
    return made


def _record(name: str, value: float, **labels: str) -> None:
    # A metrics backend's trouble must never fail a run or a pass: the point is lost, said once.
    try:
        instrument = _instruments()[name]
        if NAMES[name][1] == "s":
            instrument.record(max(value, 0.0), labels)  # clocks of two processes may disagree
        else:
            instrument.add(value, labels)
    except Exception:
        logger.warning("pikku_workflows: a metric could not be recorded", exc_info=True)


def _after_commit(record: Callable[[], None]) -> None:
    if metrics_on():
        transaction.on_commit(record)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def count_run_finished(workflow: str, status: str) -> None:
    """Called after the commit that ended the run (with its span)."""
    _record("pikku.runs.finished", 1, workflow=workflow, status=status)


def record_attempt_duration(
    function_name: str | None, dispatch: str | None, seconds: float
) -> None:
    """Called after the commit that ended the attempt (with its span); attempts of step
    functions only (a sleep, a wait or a child has no function)."""
    if function_name:
        _record("pikku.step.duration", seconds, function=function_name, dispatch=dispatch or "")


def record_schedule_to_start_after_commit(function_name: str | None, seconds: float | None) -> None:
    """A queued attempt of `function_name` started `seconds` after it was queued."""
    if seconds is not None:
        _after_commit(lambda: _record_schedule_to_start(function_name, seconds))


def _record_schedule_to_start(function_name: str | None, seconds: float) -> None:
    from .gauges import queue_of

    _record("pikku.step.schedule_to_start", seconds, queue=queue_of(function_name))


def record_pass_after_commit(workflow: str, seconds: float) -> None:
    _after_commit(lambda: _record("pikku.pass.replay", seconds, workflow=workflow))


def count_lease_expired_after_commit() -> None:
    _after_commit(lambda: _record("pikku.lease.expired", 1))


def record_fire_delay_after_commit(seconds: float) -> None:
    _after_commit(lambda: _record("pikku.schedule.fire_delay", seconds))
