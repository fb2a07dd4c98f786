"""Named predicates over runs and steps, shared by claims, recovery, the admin filters and the
HTTP API's filters."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.functions import Coalesce, Now

from .status import TERMINAL_RUN_STATUSES, ApprovalStatus, RunStatus, StepKind, StepStatus
from .waiting import WaitingKind

if TYPE_CHECKING:
    from django.db.models.sql.compiler import SQLCompiler


class DatabaseNow(Now):
    """The database's clock at the moment the statement runs.

    Postgres' now() is frozen at transaction start; leases must be judged on
    clock_timestamp(). SQLite's CURRENT_TIMESTAMP is already per statement.
    """

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="CLOCK_TIMESTAMP()", **extra)


class StatementNow(Now):
    """The database's clock when the statement began: stable within it, so an index serves a
    comparison with it (clock_timestamp() is volatile and makes PostgreSQL test every row)."""

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra)


def database_ago(seconds: float) -> Any:
    """`seconds` before now on the database clock (an expression the query evaluates)."""
    return DatabaseNow() - timedelta(seconds=seconds)


def database_in(seconds: float) -> Any:
    """`seconds` from now on the database clock (an expression the write evaluates)."""
    return DatabaseNow() + timedelta(seconds=seconds)


# Searching "cafe" for a workflow name should not also list every run whose id starts with it.
MIN_ID_PREFIX = 4
_HEX_AND_DASHES = re.compile(r"^[0-9a-f-]+$")


def run_id_query(search_term: str) -> models.Q | None:
    """A filter for runs whose id is `search_term` (any UUID spelling) or starts with it.

    A prefix becomes an id range, so Postgres uses the primary key index instead of casting
    every id to text; UUIDs order like their hex digits on Postgres and SQLite alike.
    """
    term = search_term.strip().lower()
    try:
        return models.Q(pk=uuid.UUID(term))
    except ValueError:
        pass
    digits = term.replace("-", "")
    if not _HEX_AND_DASHES.match(term) or not MIN_ID_PREFIX <= len(digits) < 32:
        return None
    return models.Q(
        pk__gte=uuid.UUID(digits.ljust(32, "0")), pk__lte=uuid.UUID(digits.ljust(32, "f"))
    )


def runs_with_step(steps: WorkflowStepQuerySet) -> models.Q:
    """Running runs with at least one step in `steps`."""
    return models.Q(status=RunStatus.RUNNING) & models.Q(
        models.Exists(steps.filter(run_id=models.OuterRef("pk")))
    )


def _steps() -> WorkflowStepQuerySet:
    from .models import WorkflowStep  # models imports this module

    return WorkflowStep.objects.all()


def _recorded_wait(kind: WaitingKind) -> Callable[[], models.Q]:
    return lambda: models.Q(waiting_on=kind)


def _lease_lapsed() -> models.Q:
    return runs_with_step(_steps().lease_lapsed())


# The runs waiting on each kind of `waiting.WaitingKind`, in its order: the kind the run's row
# records (its newest step in flight's, as of its last pass or move; indexed). The clock decides
# whether a step's lease lapsed, so among runs waiting on a step that is judged from the steps.
WAITING_KINDS: dict[str, Callable[[], models.Q]] = {
    WaitingKind.STEP: lambda: models.Q(waiting_on=WaitingKind.STEP) & ~_lease_lapsed(),
    WaitingKind.TIMER: _recorded_wait(WaitingKind.TIMER),
    WaitingKind.RETRY: _recorded_wait(WaitingKind.RETRY),
    WaitingKind.CHILD: _recorded_wait(WaitingKind.CHILD),
    WaitingKind.LEASE: lambda: models.Q(waiting_on=WaitingKind.STEP) & _lease_lapsed(),
    WaitingKind.APPROVAL: _recorded_wait(WaitingKind.APPROVAL),
    WaitingKind.SIGNAL: _recorded_wait(WaitingKind.SIGNAL),
    WaitingKind.SUSPEND: _recorded_wait(WaitingKind.SUSPEND),
    WaitingKind.PASS: _recorded_wait(WaitingKind.PASS),
    WaitingKind.ADMISSION: lambda: models.Q(status=RunStatus.QUEUED),
}


def waiting_on_q(kind: str) -> models.Q:
    """The runs waiting on `kind`, as a filter (`ValueError` for a kind not named here)."""
    predicate = WAITING_KINDS.get(kind)
    if predicate is None:
        raise ValueError(f"Unknown waiting kind {kind!r}")
    return predicate()


class RunLevel(models.TextChoices):
    """Which runs a list shows: top-level runs (the default of the admin's list, the API's and
    the `pikku runs` command), child runs (a `wf.do` of a workflow), or all."""

    TOP = "top", "Top-level runs"
    CHILDREN = "children", "Child runs"
    ALL = "all", "All runs"


class WorkflowRunQuerySet(models.QuerySet):
    def running(self) -> WorkflowRunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def at_level(self, level: str) -> WorkflowRunQuerySet:
        """The runs of `level` (a RunLevel): top-level ones, child runs, or all."""
        if level == RunLevel.TOP:
            return self.filter(parent_run__isnull=True)
        if level == RunLevel.CHILDREN:
            return self.filter(parent_run__isnull=False)
        return self

    def latest_of_chains(self) -> WorkflowRunQuerySet:
        """Every run but those that continued as new: of each chain, its latest run. A run is
        `continued` exactly when its successor exists (the hand-over writes both at once), so
        the status is the whole test, and the list stays one row per run (an index of its own).
        """
        return self.exclude(status=RunStatus.CONTINUED)

    def waiting_on(self, kind: str) -> WorkflowRunQuerySet:
        """Runs waiting on `kind` (a key of WAITING_KINDS)."""
        return self.filter(waiting_on_q(kind))

    def awaiting_approval(self, awaiting: bool = True) -> WorkflowRunQuerySet:
        """Runs parked on an approval (with `awaiting=False`, every other run)."""
        parked = waiting_on_q(WaitingKind.APPROVAL)
        return self.filter(parked) if awaiting else self.exclude(parked)

    def matching(self, term: str) -> WorkflowRunQuerySet:
        """Runs whose workflow name contains `term` or whose id is or starts with it."""
        found = models.Q(workflow__icontains=term.strip())
        id_query = run_id_query(term)
        return self.filter((found | id_query) if id_query is not None else found)

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

    def with_attempt_end(self) -> WorkflowStepQuerySet:
        """Annotated with when the current attempt ended (`ended_at`: its history row's outcome
        time; None while it has not ended): what `wf.now()` moves on to as the body takes it."""
        from .models import WorkflowStepHistory  # models imports this module

        ends = WorkflowStepHistory.objects.filter(
            step_id=models.OuterRef("pk"), attempt=models.OuterRef("attempt")
        ).values(end=Coalesce("succeeded_at", "failed_at"))
        return self.annotate(ended_at=models.Subquery(ends[:1]))

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

    def unsettled(self) -> WorkflowStepQuerySet:
        """Steps whose outcome is not final yet: not succeeded, and not failed for good."""
        return self.exclude(status=StepStatus.SUCCEEDED).exclude(
            status=StepStatus.FAILED, attempt__gte=models.F("attempt_limit")
        )

    def retrying(self) -> WorkflowStepQuerySet:
        """Failed attempts with attempts left: waiting out their backoff, or due for the next."""
        return self.filter(status=StepStatus.FAILED, attempt__lt=models.F("attempt_limit"))

    def busy(self) -> WorkflowStepQuerySet:
        """Steps a worker has or is about to have: the summary's kind `step`."""
        return self.filter(
            models.Q(status=StepStatus.PENDING)
            # Scheduled and not a sleep's timer (`sleeping`).
            | (
                models.Q(status=StepStatus.SCHEDULED)
                & ~models.Q(kind=StepKind.SLEEP, wake_at__isnull=False)
            )
            | models.Q(status=StepStatus.RUNNING, lease_expires_at__isnull=True)
            | models.Q(status=StepStatus.RUNNING, lease_expires_at__gte=DatabaseNow())
        )

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
        """Timers that have come: sleeps (scheduled), retry backoffs (failed), waits' deadlines
        and steps a rate held (pending until its time)."""
        return self.filter(
            status__in=[
                StepStatus.PENDING,
                StepStatus.SCHEDULED,
                StepStatus.FAILED,
                StepStatus.WAITING,
            ],
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
