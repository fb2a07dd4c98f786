"""Named predicates over runs and steps, shared by claims, recovery and the admin filters."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.functions import Now

from .status import TERMINAL_RUN_STATUSES, ApprovalStatus, RunStatus, StepKind, StepStatus

if TYPE_CHECKING:
    from django.db.models.sql.compiler import SQLCompiler


class DatabaseNow(Now):
    """The database's clock at the moment the statement runs.

    Postgres' now() is frozen at transaction start; leases must be judged on
    clock_timestamp(). SQLite's CURRENT_TIMESTAMP is already per statement.
    """

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="CLOCK_TIMESTAMP()", **extra)


def database_ago(seconds: float) -> Any:
    """`seconds` before now on the database clock (an expression the query evaluates)."""
    return DatabaseNow() - timedelta(seconds=seconds)


def database_in(seconds: float) -> Any:
    """`seconds` from now on the database clock (an expression the write evaluates)."""
    return DatabaseNow() + timedelta(seconds=seconds)


class WorkflowRunQuerySet(models.QuerySet):
    def running(self) -> WorkflowRunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def lease_free(self) -> WorkflowRunQuerySet:
        """The run lease is free: nobody holds it, or the holder let it lapse."""
        return self.filter(
            models.Q(lease_holder__isnull=True) | models.Q(lease_expires_at__lt=DatabaseNow())
        )

    def lease_lapsed(self) -> WorkflowRunQuerySet:
        """Running runs whose orchestrator pass stopped renewing the run lease (it died)."""
        return self.running().filter(lease_holder__isnull=False, lease_expires_at__lt=DatabaseNow())

    def stalled(self, before: datetime | Any) -> WorkflowRunQuerySet:
        """Running runs nobody drives: no pass holds the lease, nothing is in flight, and
        neither the run nor any of its steps changed since `before`."""
        from .models import WorkflowStep  # models imports this module

        steps = WorkflowStep.objects.filter(run_id=models.OuterRef("pk"))
        return (
            self.running()
            .lease_free()
            .filter(updated_at__lt=before)
            .filter(
                ~models.Exists(steps.in_flight()),
                ~models.Exists(steps.filter(updated_at__gte=before)),
            )
        )


class WorkflowStepQuerySet(models.QuerySet):
    def lease_lapsed(self) -> WorkflowStepQuerySet:
        """Running steps whose worker stopped renewing its lease."""
        return self.filter(status=StepStatus.RUNNING, lease_expires_at__lt=DatabaseNow())

    def with_clock(self) -> WorkflowStepQuerySet:
        """Annotated with what the database clock says of each step as it is read: whether its
        lease lapsed (`lease_lapsed`) and how long until its timer is due (`wake_in`)."""
        return self.annotate(
            lease_lapsed=models.ExpressionWrapper(
                models.Q(lease_expires_at__lt=DatabaseNow()), output_field=models.BooleanField()
            ),
            wake_in=models.ExpressionWrapper(
                models.F("wake_at") - DatabaseNow(), output_field=models.DurationField()
            ),
        )

    def in_flight(self) -> WorkflowStepQuerySet:
        """Steps that will move without help: queued, parked on a live child, leased, or with a
        timer ahead. A running step whose lease lapsed, and a step parked on a child that ended,
        are not: nobody will move them unless recovery does."""
        return self.filter(
            models.Q(status=StepStatus.SCHEDULED)
            | (
                models.Q(status=StepStatus.WAITING)
                & ~models.Q(child_run__status__in=TERMINAL_RUN_STATUSES)
            )
            | models.Q(status=StepStatus.RUNNING, lease_expires_at__gte=DatabaseNow())
            | models.Q(wake_at__gt=DatabaseNow())
        )

    def awaiting_ended_child(self, before: Any) -> WorkflowStepQuerySet:
        """Steps still parked on a child run that ended before `before`: the parent was never
        told (its process died between the child's end and the news)."""
        return self.filter(
            status=StepStatus.WAITING,
            child_run__status__in=TERMINAL_RUN_STATUSES,
            child_run__finished_at__lt=before,
        )

    def retrying(self) -> WorkflowStepQuerySet:
        """Failed attempts with attempts left: waiting out their backoff, or due for the next."""
        return self.filter(status=StepStatus.FAILED, attempt__lt=models.F("attempt_limit"))

    def sleeping(self) -> WorkflowStepQuerySet:
        """Durable timers (`wf.sleep`) that have not fired yet."""
        return self.filter(status=StepStatus.SCHEDULED, kind=StepKind.SLEEP, wake_at__isnull=False)

    def awaiting_child(self) -> WorkflowStepQuerySet:
        """Steps parked on a child run."""
        return self.filter(status=StepStatus.WAITING, child_run__isnull=False)

    def awaiting_approval(self) -> WorkflowStepQuerySet:
        """Steps parked on an approval (`wf.approval`) nobody has settled yet."""
        return self.filter(status=StepStatus.WAITING, kind=StepKind.APPROVAL)

    def awaiting_signal(self) -> WorkflowStepQuerySet:
        """Steps parked on a signal (`wf.wait_for_signal`) that has not come yet."""
        return self.filter(status=StepStatus.WAITING, kind=StepKind.SIGNAL)

    def due(self) -> WorkflowStepQuerySet:
        """Timers that have come: sleeps (scheduled) and retry backoffs (failed)."""
        return self.filter(
            status__in=[StepStatus.SCHEDULED, StepStatus.FAILED, StepStatus.WAITING],
            wake_at__lte=DatabaseNow(),
        )

    def undispatched(self, before: datetime | Any) -> WorkflowStepQuerySet:
        """Steps that should have been picked up by now (a lost queue message)."""
        return self.filter(
            status__in=[StepStatus.PENDING, StepStatus.SCHEDULED],
            wake_at__isnull=True,
            updated_at__lt=before,
        )


class WorkflowApprovalQuerySet(models.QuerySet):
    def pending(self) -> WorkflowApprovalQuerySet:
        """Approvals nobody has settled yet, of runs that have not ended."""
        return self.filter(status=ApprovalStatus.PENDING).exclude(
            run__status__in=TERMINAL_RUN_STATUSES
        )

    def overdue(self) -> WorkflowApprovalQuerySet:
        """Pending approvals whose deadline passed by the database clock (expiry not yet
        recorded: the timer loop or the next decision records it)."""
        return self.pending().filter(expires_at__lte=DatabaseNow())

    def reminder_due(self) -> WorkflowApprovalQuerySet:
        """Pending approvals of running runs whose next reminder is due (not those past their
        deadline: their expiry is due instead)."""
        return self.filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=DatabaseNow()),
            status=ApprovalStatus.PENDING,
            run__status=RunStatus.RUNNING,
            remind_at__lte=DatabaseNow(),
        )
