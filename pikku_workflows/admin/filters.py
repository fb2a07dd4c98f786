"""List filters of the run admin, each built on a named predicate of `querysets.py`, and the
level filter that shows top-level runs unless asked otherwise.

Filters by step match a run when *any* of its steps qualifies (a fan-out can wait on a timer
and a child at once); the "waiting on" column shows the newest step in flight.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..conf import pikku_settings
from ..models import WorkflowRun, WorkflowStep
from ..querysets import DatabaseNow, WorkflowStepQuerySet
from ..status import RunStatus, StepStatus


def _with_step(steps: WorkflowStepQuerySet) -> Q:
    """Running runs with at least one step in `steps`."""
    return Q(status=RunStatus.RUNNING) & Q(Exists(steps.filter(run_id=OuterRef("pk"))))


def _busy_steps() -> WorkflowStepQuerySet:
    """Steps a worker has or is about to have: the summary's kind `step`."""
    return WorkflowStep.objects.filter(
        Q(status=StepStatus.PENDING)
        # Scheduled and not a sleep's timer (`WorkflowStepQuerySet.sleeping`).
        | (Q(status=StepStatus.SCHEDULED) & ~Q(kind="sleep", wake_at__isnull=False))
        | Q(status=StepStatus.RUNNING, lease_expires_at__isnull=True)
        | Q(status=StepStatus.RUNNING, lease_expires_at__gte=DatabaseNow())
    )


WAITING_KINDS: dict[str, tuple[str, Any]] = {
    # kind: (label, the runs waiting that way)
    "step": ("a step (queued or running)", lambda: _with_step(_busy_steps())),
    "timer": ("a timer (sleep)", lambda: _with_step(WorkflowStep.objects.sleeping())),
    "retry": (
        "a retry backoff",
        lambda: _with_step(WorkflowStep.objects.retrying().filter(wake_at__isnull=False)),
    ),
    "child": ("a child run", lambda: _with_step(WorkflowStep.objects.awaiting_child())),
    "lease": (
        "a step whose worker went silent",
        lambda: _with_step(WorkflowStep.objects.lease_lapsed()),
    ),
    "suspend": ("an operator (suspended)", lambda: Q(status=RunStatus.SUSPENDED)),
}


class WaitingOnFilter(admin.SimpleListFilter):
    title = "waiting on"
    parameter_name = "waiting_on"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(kind, label) for kind, (label, _) in WAITING_KINDS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        kind = WAITING_KINDS.get(self.value() or "")
        return queryset.filter(kind[1]()) if kind else None


class RetryingFilter(admin.SimpleListFilter):
    """Running runs with a failed attempt that will be tried again."""

    title = "retrying"
    parameter_name = "retrying"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        retrying = _with_step(WorkflowStep.objects.retrying())
        if self.value() == "yes":
            return queryset.filter(retrying)
        if self.value() == "no":
            return queryset.exclude(retrying)
        return None


def stuck_runs(kind: str) -> QuerySet[WorkflowRun]:
    """Runs that need help: a lapsed lease (a step's or the orchestrator's), or stalled
    (nothing in flight and nothing changed for `STALLED_RUN_AFTER_SECONDS`)."""
    runs = WorkflowRun.objects.all()
    lapsed = runs.lease_lapsed() | runs.filter(_with_step(WorkflowStep.objects.lease_lapsed()))
    before = timezone.now() - timedelta(seconds=pikku_settings.STALLED_RUN_AFTER_SECONDS)
    stalled = runs.stalled(before)
    return {"lease": lapsed, "stalled": stalled}.get(kind, lapsed | stalled)


class StuckFilter(admin.SimpleListFilter):
    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        minutes = round(pikku_settings.STALLED_RUN_AFTER_SECONDS / 60, 1)
        return [
            ("any", "Any"),
            ("lease", "A worker went silent"),
            ("stalled", f"Stalled (idle > {minutes:g} min)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        if self.value() not in ("any", "lease", "stalled"):
            return None
        return queryset.filter(pk__in=stuck_runs(self.value() or "").values("pk"))


class StartedFilter(admin.DateFieldListFilter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = "started"


class RunLevelFilter(admin.SimpleListFilter):
    """Top-level runs by default: child runs (a `wf.do` of a workflow) are their parent's detail.
    A search shows every level (a child's id must be findable)."""

    title = "level"
    parameter_name = "level"
    TOP, CHILDREN, ALL = "top", "children", "all"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(self.TOP, "Top-level runs"), (self.CHILDREN, "Child runs"), (self.ALL, "All runs")]

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.searching = bool(request.GET.get("q"))

    def level(self) -> str:
        return self.value() or (self.ALL if self.searching else self.TOP)

    def choices(self, changelist: Any) -> Any:
        # No "All" entry removing the parameter: without it the default (top-level) applies.
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.level() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        level = self.level()
        if level == self.TOP:
            return queryset.filter(parent_run__isnull=True)
        if level == self.CHILDREN:
            return queryset.filter(parent_run__isnull=False)
        return None
