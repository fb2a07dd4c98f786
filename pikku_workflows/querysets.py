"""Named predicates over runs and steps, shared by claims, recovery and the admin filters."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.functions import Now

from .status import RunStatus, StepStatus

if TYPE_CHECKING:
    from django.db.models.sql.compiler import SQLCompiler


class DatabaseNow(Now):
    """The database's clock at the moment the statement runs.

    Postgres' now() is frozen at transaction start; leases must be judged on
    clock_timestamp(). SQLite's CURRENT_TIMESTAMP is already per statement.
    """

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="CLOCK_TIMESTAMP()", **extra)


class WorkflowRunQuerySet(models.QuerySet):
    def settled(self) -> WorkflowRunQuerySet:
        return self.filter(status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED])

    def running(self) -> WorkflowRunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def lease_free(self) -> WorkflowRunQuerySet:
        """The run lease is free: nobody holds it, or the holder let it lapse."""
        return self.filter(
            models.Q(lease_holder__isnull=True) | models.Q(lease_expires_at__lt=DatabaseNow())
        )

    def due(self) -> WorkflowRunQuerySet:
        """Running runs whose timer (a parked long sleep or retry) has come."""
        return self.running().filter(wake_at__lte=DatabaseNow())


class WorkflowStepQuerySet(models.QuerySet):
    def lease_lapsed(self) -> WorkflowStepQuerySet:
        """Running steps whose worker stopped renewing its lease (NULL = parked, never lapsed)."""
        return self.filter(status=StepStatus.RUNNING, lease_expires_at__lt=DatabaseNow())

    def due(self) -> WorkflowStepQuerySet:
        """Timers that have come: sleeps (scheduled) and retry backoffs (failed)."""
        return self.filter(
            status__in=[StepStatus.SCHEDULED, StepStatus.FAILED, StepStatus.WAITING],
            wake_at__lte=DatabaseNow(),
        )

    def undispatched(self, before: datetime) -> WorkflowStepQuerySet:
        """Steps that should have been picked up by now (a lost queue message)."""
        return self.filter(
            status__in=[StepStatus.PENDING, StepStatus.SCHEDULED],
            wake_at__isnull=True,
            updated_at__lt=before,
        )
