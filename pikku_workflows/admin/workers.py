"""The Workers page (the live `pikku_worker` processes and their heartbeats), and the banner the
run pages show when no timer loop has been seen for a minute."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import WorkflowWorker
from ..worker_registration import SILENT_AFTER_SECONDS, last_seen, timer_loop_seen
from .display import ADMIN_CSS, format_moment
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

    @admin.display(description="state")
    def state(self, worker: WorkflowWorker) -> SafeString:
        silent = timezone.now() - worker.last_seen_at > timedelta(seconds=SILENT_AFTER_SECONDS)
        kind, label = ("silent", "not seen") if silent else ("live", "live")
        return format_html('<span class="pikku-badge pikku-worker-{}">{}</span>', kind, label)

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
