"""List filters of the run admin, each built on a named predicate of `querysets.py` (the HTTP
API's filters use the same ones), and the level filter that shows top-level runs unless asked
otherwise.

Filters by step match a run when *any* of its steps qualifies (a fan-out can wait on a timer
and a child at once); the "waiting on" column shows the newest step in flight.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..conf import pikku_settings
from ..models import WorkflowRun
from ..querysets import WAITING_KINDS, DatabaseNow, RunLevel, waiting_on_q
from ..registry import registry
from ..status import TERMINAL_RUN_STATUSES, RunStatus
from ..waiting import WaitingKind


class WaitingOnFilter(admin.SimpleListFilter):
    title = "waiting on"
    parameter_name = "waiting_on"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(WaitingKind.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        kind = self.value()
        return queryset.filter(waiting_on_q(kind)) if kind in WAITING_KINDS else None


class WorkflowFilter(admin.SimpleListFilter):
    """Runs of one workflow, offered from the registered workflows: Django's own field filter
    reads the distinct names of the whole table on every page (`?workflow=` still takes any)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted(registry.workflows)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        return queryset.filter(workflow=self.value()) if self.value() else None


class LatestOfChainsFilter(admin.SimpleListFilter):
    """Of each chain of runs that continued as new, only its latest run (the API's
    `latest_only`): an entity workflow then shows as one row, however many links it has."""

    title = "chains"
    parameter_name = "latest_only"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1", "Latest run of each")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        return queryset.latest_of_chains() if self.value() == "1" else None  # type: ignore[attr-defined]


class RetryingFilter(admin.SimpleListFilter):
    """Running runs waiting out a retry's backoff (their row's `waiting_on`: the newest step
    in flight failed an attempt that will be tried again)."""

    title = "retrying"
    parameter_name = "retrying"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        retrying = Q(status=RunStatus.RUNNING, waiting_on=WaitingKind.RETRY)
        if self.value() == "yes":
            return queryset.filter(retrying)
        if self.value() == "no":
            return queryset.exclude(retrying)
        return None


def stuck_runs(kind: str) -> Q:
    """Runs that need help, judged from their rows: the orchestrator pass holding the run's
    lease went silent (`lease`), or stalled (`stalled`: no pass holds it, it waits for its next
    pass with nothing in flight, and its row has not moved for `STALLED_RUN_AFTER_SECONDS`).
    A step whose own worker went silent is the "waiting on" filter's (it reads the steps)."""
    lapsed = Q(
        status=RunStatus.RUNNING, lease_holder__isnull=False, lease_expires_at__lt=DatabaseNow()
    )
    before = timezone.now() - timedelta(seconds=pikku_settings.STALLED_RUN_AFTER_SECONDS)
    lease_free = Q(lease_holder__isnull=True) | Q(lease_expires_at__lt=DatabaseNow())
    stalled = (
        Q(status=RunStatus.RUNNING, waiting_on=WaitingKind.PASS, updated_at__lt=before) & lease_free
    )
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
        return queryset.filter(stuck_runs(self.value() or ""))


class StartedFilter(admin.DateFieldListFilter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = "started"


# The runs a deploy leaves on an older version: those still in flight (status-indexed, so the
# filter's counts never read the finished runs of a big table).
IN_FLIGHT = [status for status in RunStatus.values if status not in TERMINAL_RUN_STATUSES]


def version_counts() -> list[tuple[str, str, int]]:
    """(workflow, version, runs in flight) of every version other than the one each registered
    workflow would start a run on now, most runs first: one GROUP BY query."""
    current = {name: d.code_version for name, d in registry.workflows.items()}
    counts = (
        WorkflowRun.objects.filter(workflow__in=current, status__in=IN_FLIGHT)
        .values_list("workflow", "code_version")
        .annotate(runs=Count("pk"))
        .order_by()
    )
    older = [(w, v, n) for w, v, n in counts if v != current[w]]
    return sorted(older, key=lambda row: (-row[2], row[0], row[1]))


def started_on_older_version() -> Q:
    """Runs in flight of a registered workflow that started on a version other than its
    current one."""
    current = {name: d.code_version for name, d in registry.workflows.items()}
    on_current = Q(pk__in=[])
    for name, version in current.items():
        on_current |= Q(workflow=name, code_version=version)
    return Q(workflow__in=current, status__in=IN_FLIGHT) & ~on_current


class VersionFilter(admin.SimpleListFilter):
    """Runs in flight that started on an older version than the one deployed here, by version:
    the runs a deploy leaves in flight on old code (code runs replay under the new code; graph runs go on
    from their stored definition)."""

    title = "started on an older version"
    parameter_name = "version"
    OLDER = "older"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        older = version_counts()
        if not older:
            return []
        total = sum(runs for _, _, runs in older)
        return [
            (self.OLDER, f"any older version ({total})"),
            *((f"{w}@{v}", f"{w} @ {v[:12] or '(none)'} ({n})") for w, v, n in older),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if not value:
            return None
        if value == self.OLDER:
            return queryset.filter(started_on_older_version())
        workflow, _, version = value.rpartition("@")
        return queryset.filter(workflow=workflow, code_version=version, status__in=IN_FLIGHT)


class RunLevelFilter(admin.SimpleListFilter):
    """Top-level runs by default: child runs (a `wf.do` of a workflow) are their parent's detail.
    A search shows every level (a child's id must be findable)."""

    title = "level"
    parameter_name = "level"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(RunLevel.choices)

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.searching = bool(request.GET.get("q"))

    def level(self) -> str:
        return self.value() or (RunLevel.ALL if self.searching else RunLevel.TOP)

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
        return None if level == RunLevel.ALL else queryset.at_level(level)  # type: ignore[attr-defined]
