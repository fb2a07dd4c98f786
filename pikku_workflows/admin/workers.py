"""The Workers page (the live `pikku_worker` processes and their heartbeats), and the banner the
run pages show when no timer loop has been seen for a minute."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import WorkflowWorker
from ..worker_registration import (
    MISSED_HEARTBEATS,
    SILENT_AFTER_SECONDS,
    last_seen,
    timer_loop_seen,
    with_silence,
    worker_silent_after,
)
from .display import ADMIN_CSS, format_duration, format_moment
from .records import ReadOnlyAdminMixin


@admin.register(WorkflowWorker)
class WorkflowWorkerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("host", "pid", "cluster", "state", "seen", "started", "steps_in_flight")
    list_filter = ("cluster", "host")
    fields = readonly_fields = (
        "host",
        "pid",
        "cluster",
        "state",
        "started_at",
        "last_seen_at",
        "steps_in_flight",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {**(extra_context or {}), "pikku_worker_warning": worker_warning()}
        return super().changelist_view(request, context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowWorker]:
        return with_silence(super().get_queryset(request))

    @admin.display(description="state")
    def state(self, worker: WorkflowWorker) -> SafeString:
        """ "not seen" once it missed MISSED_HEARTBEATS heartbeats (on the database clock)."""
        if getattr(worker, "silent", False):
            return format_html(
                '<span class="pikku-badge pikku-worker-silent" title="{}">not seen</span>',
                f"{MISSED_HEARTBEATS} heartbeats missed in a row "
                f"({format_duration(timedelta(seconds=worker_silent_after()))}): killed, hung or "
                "cut off from the database; the steps it ran run again once their leases lapse.",
            )
        return format_html('<span class="pikku-badge pikku-worker-{}">{}</span>', "live", "live")

    @admin.display(description="last heartbeat", ordering="last_seen_at")
    def seen(self, worker: WorkflowWorker) -> SafeString:
        return format_moment(worker.last_seen_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, worker: WorkflowWorker) -> SafeString:
        return format_moment(worker.started_at)


def worker_warning() -> SafeString | None:
    """Why sleeps and retries are stuck, when no timer loop was seen for SILENT_AFTER_SECONDS;
    None while one runs. One query (two when warning)."""
    if timer_loop_seen():
        return None
    seen = last_seen()
    when = format_html(" (the last one was seen {})", format_moment(seen)) if seen else ""
    return format_html(
        "No <code>pikku_worker</code> timer loop has been seen for {} s{}: sleeps, retry "
        "backoffs and recovery wait until one runs. Start one with <code>python manage.py "
        "pikku_worker</code> (django-q2's <code>qcluster</code> alone runs no timers).",
        SILENT_AFTER_SECONDS,
        when,
    )
