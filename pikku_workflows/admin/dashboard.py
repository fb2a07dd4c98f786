"""The dashboard page of the run admin: charts drawn on the server over a chosen window (runs
started and finished, failure rate by workflow, step durations by function, queue lag, pending
approvals by age), each linking to the run list filtered to what it counts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from ..observability import dashboard_figures as figures
from ..observability.charts import Mark, column_chart, row_chart
from ..status import RunStatus
from ..waiting import WaitingKind

ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
LABEL_FORMATS = {"minute": "%H:%M", "hour": "%H:%M", "day": "%d %b"}


@dataclass(frozen=True)
class Chart:
    title: str
    link: str
    svg: SafeString
    empty: bool


class DashboardAdmin(admin.ModelAdmin):
    """Adds `dashboard/` to the run admin, for users who may view runs."""

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_dashboard"
        own = [path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name=name)]
        return own + super().get_urls()

    def dashboard_url(self) -> str:
        opts = self.opts
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_dashboard")

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        window = figures.WINDOWS.get(request.GET.get("window", ""))
        window = window or figures.WINDOWS[figures.DEFAULT_WINDOW]
        now = timezone.now()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Workflow dashboard",
            "windows": [(name, name == window.name) for name in figures.WINDOWS],
            "charts": Charts(self._run_list(), window, now).all(),
            "media": self.media,
        }
        return TemplateResponse(
            request, "admin/pikku_workflows/workflowrun/dashboard.html", context
        )

    def _run_list(self) -> str:
        opts = self.opts
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist")


class Charts:
    """The dashboard's charts over `window`, linking into the run list at `run_list`."""

    def __init__(self, run_list: str, window: figures.Window, now: datetime) -> None:
        self.run_list, self.window, self.now = run_list, window, now
        self.buckets = window.buckets(now)
        self.since = window.start(now)
        self.ended = figures.ended_runs(window, now)

    def all(self) -> list[Chart]:
        return [
            self.started(),
            self.finished(),
            self.failure_rates(),
            self.step_durations(),
            self.queue_lag(),
            self.approvals(),
        ]

    def runs(self, **filters: Any) -> str:
        """The run list, all levels, filtered by `filters` (the admin's own parameters)."""
        return f"{self.run_list}?{urlencode({'level': 'all', **filters})}"

    def _in_bucket(self, field: str, bucket: datetime) -> dict[str, str]:
        end = self.buckets[self.buckets.index(bucket) + 1] if bucket != self.buckets[-1] else None
        bounds = {f"{field}__gte": bucket.isoformat()}
        if end is not None:
            bounds[f"{field}__lt"] = end.isoformat()
        return bounds

    def _label(self, bucket: datetime) -> str:
        return bucket.strftime(LABEL_FORMATS[self.window.interval])

    def started(self) -> Chart:
        counts = figures.runs_started(self.window, self.now)
        marks = [
            Mark(
                self._label(b),
                (float(counts.get(b, 0)),),
                self.runs(**self._in_bucket("created_at", b)),
            )
            for b in self.buckets
        ]
        link = self.runs(created_at__gte=self.since.isoformat())
        return _chart("Runs started", link, column_chart(marks, ["started"]), not counts)

    def finished(self) -> Chart:
        counts = figures.runs_finished(self.ended)
        marks = [
            Mark(
                self._label(b),
                tuple(float(counts.get(b, {}).get(status, 0)) for status in ENDED),
                self.runs(**self._in_bucket("finished_at", b)),
            )
            for b in self.buckets
        ]
        link = self.runs(finished_at__gte=self.since.isoformat())
        return _chart("Runs finished", link, column_chart(marks, ENDED), not counts)

    def failure_rates(self) -> Chart:
        rows = figures.failure_rates(self.ended)
        marks = [
            Mark(
                f"{workflow} ({failed}/{ended})",
                (100.0 * failed / ended,),
                self.runs(
                    status__exact=RunStatus.FAILED,
                    workflow__exact=workflow,
                    finished_at__gte=self.since.isoformat(),
                ),
            )
            for workflow, failed, ended in rows
        ]
        link = self.runs(status__exact=RunStatus.FAILED, finished_at__gte=self.since.isoformat())
        return _chart("Failure rate by workflow", link, row_chart(marks, ["failed"], "%"), not rows)

    def step_durations(self) -> Chart:
        rows = figures.step_durations(self.window, self.now)
        marks = [Mark(name, (p50, p95)) for name, p50, p95 in rows]
        link = self.runs(created_at__gte=self.since.isoformat())
        svg = row_chart(marks, ["p50", "p95"], " s")
        return _chart("Step duration by function", link, svg, not rows)

    def queue_lag(self) -> Chart:
        lag = figures.queue_lag(self.window, self.now)
        marks = [Mark(self._label(b), (lag.get(b, 0.0),)) for b in self.buckets]
        link = self.runs(waiting_on=WaitingKind.STEP)
        svg = column_chart(marks, ["longest wait for a worker"], " s")
        return _chart("Queue lag (queued to started)", link, svg, not lag)

    def approvals(self) -> Chart:
        rows = figures.approvals_by_age(self.now)
        link = self.runs(waiting_on=WaitingKind.APPROVAL)
        marks = [Mark(label, (float(n),), link) for label, n in rows]
        svg = row_chart(marks, ["pending"])
        return _chart("Approvals pending, by age", link, svg, not any(n for _, n in rows))


def _chart(title: str, link: str, svg: str, empty: bool) -> Chart:
    # The SVG is built by `charts`, which escapes every label it writes.
    return Chart(title, link, mark_safe(svg), empty)
