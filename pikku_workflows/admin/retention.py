"""Retention in the admin: the hold and release actions on runs (with `hold_workflowrun`,
through `pw.hold_run`), and the tombstones purged runs leave, where a link to a purged run's
page lands instead of "doesn't exist"."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.safestring import SafeString

import pikku_workflows as pw

from ..engine.operations.holds import HOLD_PERMISSION
from ..models import WorkflowRun, WorkflowRunTombstone
from .display import ADMIN_CSS, status_badge
from .records import ReadOnlyAdminMixin


class RunHoldsAdmin(admin.ModelAdmin):
    """The hold and release actions of the run admin, and the run page of a purged run."""

    def has_hold_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{HOLD_PERMISSION}")

    @admin.action(description="Hold selected runs from purges", permissions=["hold"])
    def hold_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._hold(request, queryset, hold=True)

    @admin.action(description="Release selected runs for purges", permissions=["hold"])
    def release_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._hold(request, queryset, hold=False)

    def _hold(self, request: HttpRequest, queryset: QuerySet[WorkflowRun], *, hold: bool) -> None:
        changed, gone = 0, 0
        for run_id in queryset.exclude(retention_hold=hold).values_list("pk", flat=True):
            try:
                pw.hold_run(run_id, hold=hold, by=request.user)
            except pw.RunNotFound:
                gone += 1  # purged since the list was shown
                continue
            changed += 1
        done = "held from purges" if hold else "released for purges"
        self.message_user(request, f"{changed} run(s) {done}.", messages.SUCCESS)
        if gone:
            self.message_user(request, f"{gone} run(s) were purged meanwhile.", messages.WARNING)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        tombstone = _tombstone_of(object_id)
        if tombstone is not None and not WorkflowRun.objects.filter(pk=tombstone.pk).exists():
            purged = tombstone.purged_at.strftime("%Y-%m-%d %H:%M UTC")
            self.message_user(
                request, f"Run {tombstone.pk} was purged on {purged} (retention).", messages.INFO
            )
            name = f"{self.admin_site.name}:pikku_workflows_workflowruntombstone_change"
            return HttpResponseRedirect(reverse(name, args=[tombstone.pk]))
        return super().change_view(request, object_id, form_url, extra_context)


def _tombstone_of(object_id: str) -> WorkflowRunTombstone | None:
    try:
        pk = uuid.UUID(str(object_id))
    except ValueError:
        return None
    return WorkflowRunTombstone.objects.filter(pk=pk).first()


@admin.register(WorkflowRunTombstone)
class WorkflowRunTombstoneAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What is left of purged runs while TOMBSTONE_DAYS keep it: which run, of which workflow,
    how it ended and when it was purged."""

    list_display = ("id", "workflow", "ended_as", "finished_at", "purged_at")
    list_filter = ("status", "workflow")
    search_fields = ("=id", "workflow", "idempotency_key")
    fields = readonly_fields = (
        "id",
        "workflow",
        "ended_as",
        "finished_at",
        "purged_at",
        "idempotency_key",
        "idempotency_scope",
        "started_by",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    @admin.display(description="ended as", ordering="status")
    def ended_as(self, tombstone: WorkflowRunTombstone) -> SafeString:
        return status_badge(tombstone.status, tombstone.get_status_display())
