"""Read-only admin for runs (with their steps and attempt history), versions and the audit log.

Only the engine writes run and step rows, so nothing here can add, edit or delete them; operator
actions (cancel, suspend, resume, retry, fork) will call `engine.operations`.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.contrib.contenttypes.admin import GenericTabularInline
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .models import (
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
    WorkflowStepHistory,
    WorkflowVersion,
)
from .status import StepStatus

ADMIN_CSS = "pikku_workflows/admin.css"
EMPTY = "-"
# Searching "cafe" for a workflow name should not also list every run whose id starts with it.
MIN_ID_PREFIX = 4
_HEX_AND_DASHES = re.compile(r"^[0-9a-f-]+$")


def format_duration(delta: timedelta) -> str:
    """`850 ms`, `4.2 s`, `12 s`, `3 min 5 s`, `2 h 3 min`, `4 d 2 h`."""
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def run_id_query(search_term: str) -> Q | None:
    """A filter for runs whose id is `search_term` (any UUID spelling) or starts with it.

    A prefix becomes an id range, so Postgres uses the primary key index instead of casting
    every id to text; UUIDs order like their hex digits on Postgres and SQLite alike.
    """
    term = search_term.strip().lower()
    try:
        return Q(pk=uuid.UUID(term))
    except ValueError:
        pass
    digits = term.replace("-", "")
    if not _HEX_AND_DASHES.match(term) or not MIN_ID_PREFIX <= len(digits) < 32:
        return None
    return Q(pk__gte=uuid.UUID(digits.ljust(32, "0")), pk__lte=uuid.UUID(digits.ljust(32, "f")))


def status_badge(status: str, label: str) -> SafeString:
    return format_html('<span class="pikku-badge pikku-status-{}">{}</span>', status, label)


def pretty_json(value: Any, tag: str = "pre") -> SafeString | str:
    """`value` as indented JSON in a <pre>; `tag="code"` where a <pre> is not allowed (a <p>)."""
    if value is None:
        return EMPTY
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return format_html('<{} class="pikku-json">{}</{}>', tag, text, tag)


def pretty_error(error: Any, tag: str = "pre") -> SafeString | str:
    """An error dict as JSON, its traceback (if any) shown as text rather than one escaped line."""
    if not isinstance(error, dict) or not isinstance(error.get("traceback"), str):
        return pretty_json(error, tag)
    rest = {key: value for key, value in error.items() if key != "traceback"}
    return format_html(
        '{}<{} class="pikku-json pikku-traceback">{}</{}>',
        pretty_json(rest, tag),
        tag,
        error["traceback"],
        tag,
    )


def short_id(value: uuid.UUID | str) -> str:
    return str(value)[:8]


def run_change_url(admin_site: admin.AdminSite, run_id: uuid.UUID | str) -> str:
    return reverse(f"{admin_site.name}:pikku_workflows_workflowrun_change", args=[run_id])


class ReadOnlyAdminMixin:
    """Viewable by whoever holds the view permission; nobody adds, edits or deletes here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WorkflowStepInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = WorkflowStep
    fk_name = "run"
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "step_key",
        "function_name",
        "step_status",
        "attempts",
        "result_json",
        "error_json",
        "child",
    )
    classes = ("pikku-steps",)
    verbose_name_plural = "steps"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Steps are part of their run: whoever may view the run sees them, with no step permission.
        return self.admin_site.get_model_admin(self.parent_model).has_view_permission(request, obj)

    @admin.display(description="status")
    def step_status(self, step: WorkflowStep) -> SafeString:
        return status_badge(step.status, step.get_status_display())

    @admin.display(description="attempt")
    def attempts(self, step: WorkflowStep) -> str:
        return f"{step.attempt} / {step.attempt_limit}"

    # Tabular inlines wrap read-only values in <p>, which may not contain a <pre>.
    @admin.display(description="result")
    def result_json(self, step: WorkflowStep) -> SafeString | str:
        return pretty_json(step.result, tag="code")

    @admin.display(description="error")
    def error_json(self, step: WorkflowStep) -> SafeString | str:
        return pretty_error(step.error, tag="code")

    @admin.display(description="child run")
    def child(self, step: WorkflowStep) -> SafeString | str:
        if step.child_run_id is None:
            return EMPTY
        url = run_change_url(self.admin_site, step.child_run_id)
        return format_html('<a href="{}">{}</a>', url, short_id(step.child_run_id))


RUN_SUMMARY_FIELDS = (
    "id",
    "workflow",
    "run_status",
    "created_at",
    "finished_at",
    "duration",
    "started_by",
    "subject_link",
    "parent_run",
    "forked_from",
)
RUN_PAYLOAD_FIELDS = ("input", "output", "error", "state")
RUN_DATA_FIELDS = ("input_json", "output_json", "error_json", "state_json")
RUN_ENGINE_FIELDS = (
    "inline",
    "idempotency_key",
    "graph_hash",
    "code_version",
    "planned_steps",
    "lease_holder",
    "lease_expires_at",
    "rerun_requested",
    "wake_at",
    "updated_at",
)


class WorkflowRunChangeList(ChangeList):
    def get_queryset(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> QuerySet[WorkflowRun]:
        # The list never shows the JSON payloads, which can be large: leave them in the database.
        return super().get_queryset(request, *args, **kwargs).defer(*RUN_PAYLOAD_FIELDS)


@admin.register(WorkflowRun)
class WorkflowRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("short_id", "workflow", "run_status", "progress", "started", "duration")
    list_filter = ("status", "workflow")
    search_fields = ("workflow",)
    search_help_text = "A workflow name, or a run id (in full or its first characters)."
    inlines = (WorkflowStepInline,)
    fieldsets = (
        (None, {"fields": RUN_SUMMARY_FIELDS}),
        ("Data", {"fields": RUN_DATA_FIELDS}),
        ("Engine", {"classes": ("collapse",), "fields": RUN_ENGINE_FIELDS}),
    )
    readonly_fields = RUN_SUMMARY_FIELDS + RUN_DATA_FIELDS + RUN_ENGINE_FIELDS

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowRunChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        # The progress column is counted in the list query itself (no query per row). A correlated
        # subquery rather than a JOIN + GROUP BY, so the changelist's COUNT and filter queries
        # (which drop unused non-aggregate annotations) never touch the steps table.
        succeeded = (
            WorkflowStep.objects.filter(run=OuterRef("pk"), status=StepStatus.SUCCEEDED)
            # Engine-made keys (`<key>:onError` handlers, `__suspend:<reason>`) are not progress.
            .exclude(step_key__contains=":")
            .order_by()
            .values("run")
            .annotate(count=Count("pk"))
            .values("count")
        )
        return (
            super().get_queryset(request).annotate(steps_succeeded=Coalesce(Subquery(succeeded), 0))
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        matched, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        id_query = run_id_query(search_term)
        if id_query is not None:
            matched = matched | queryset.filter(id_query)
        return matched, may_have_duplicates

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: WorkflowRun | None = None,
    ) -> Any:
        if obj is not None:
            context["attempt_history"] = self.attempt_history(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def attempt_history(self, run: WorkflowRun) -> list[dict[str, Any]]:
        """Every attempt of every step of `run`, in step order (two queries)."""
        steps = WorkflowStep.objects.filter(run=run).prefetch_related("history")
        rows = []
        for step in steps:
            for attempt in step.history.all():
                rows.append(
                    {
                        "step_key": step.step_key,
                        "attempt": attempt.attempt,
                        "status": status_badge(attempt.status, attempt.get_status_display()),
                        "times": self._attempt_times(attempt),
                        "error": pretty_error(attempt.error),
                    }
                )
        return rows

    @staticmethod
    def _attempt_times(attempt: WorkflowStepHistory) -> list[tuple[str, Any]]:
        names = ("created", "scheduled", "running", "waiting", "succeeded", "failed")
        return [(name, getattr(attempt, f"{name}_at")) for name in names]

    @admin.display(description="id", ordering="id")
    def short_id(self, run: WorkflowRun) -> str:
        return short_id(run.id)

    @admin.display(description="status", ordering="status")
    def run_status(self, run: WorkflowRun) -> SafeString:
        return status_badge(run.status, run.get_status_display())

    @admin.display(description="progress")
    def progress(self, run: WorkflowRun) -> str:
        done = getattr(run, "steps_succeeded", None)
        if done is None:
            return EMPTY
        if run.planned_steps:
            return f"{done} / {len(run.planned_steps)}"
        return f"{done} done"

    @admin.display(description="started", ordering="created_at")
    def started(self, run: WorkflowRun) -> Any:
        return run.created_at

    @admin.display(description="duration")
    def duration(self, run: WorkflowRun) -> str:
        end = run.finished_at or timezone.now()
        text = format_duration(end - run.created_at)
        return text if run.finished_at else f"{text} so far"

    @admin.display(description="subject")
    def subject_link(self, run: WorkflowRun) -> SafeString | str:
        subject = run.subject
        if subject is None:
            return EMPTY
        meta = subject._meta
        try:
            url = reverse(
                f"{self.admin_site.name}:{meta.app_label}_{meta.model_name}_change",
                args=[subject.pk],
            )
        except NoReverseMatch:
            return f"{meta.verbose_name}: {subject}"
        return format_html('<a href="{}">{}</a>', url, subject)

    @admin.display(description="input")
    def input_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.input)

    @admin.display(description="output")
    def output_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.output)

    @admin.display(description="error")
    def error_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_error(run.error)

    @admin.display(description="state")
    def state_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.state)


class WorkflowRunInline(ReadOnlyAdminMixin, GenericTabularInline):
    """The runs about an object (`pw.start_workflow(..., subject=obj)`), for the host's own admin.

    Visible to users holding the run view permission: `inlines = [WorkflowRunInline]`.
    """

    model = WorkflowRun
    ct_field = "subject_type"
    ct_fk_field = "subject_id"
    extra = 0
    can_delete = False
    fields = readonly_fields = ("run_link", "workflow", "run_status", "created_at", "finished_at")
    verbose_name = "workflow run"
    verbose_name_plural = "workflow runs"

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    @admin.display(description="run")
    def run_link(self, run: WorkflowRun) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>', run_change_url(self.admin_site, run.pk), short_id(run.pk)
        )

    @admin.display(description="status")
    def run_status(self, run: WorkflowRun) -> SafeString:
        return status_badge(run.status, run.get_status_display())


@admin.register(WorkflowVersion)
class WorkflowVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("name", "kind", "status", "short_hash", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("name", "graph_hash")
    fields = readonly_fields = (
        "name",
        "kind",
        "status",
        "graph_hash",
        "code_version",
        "created_at",
        "definition_json",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    @admin.display(description="version", ordering="graph_hash")
    def short_hash(self, version: WorkflowVersion) -> str:
        return version.graph_hash[:12]

    @admin.display(description="definition")
    def definition_json(self, version: WorkflowVersion) -> SafeString | str:
        return pretty_json(version.definition)


@admin.register(WorkflowAuditEntry)
class WorkflowAuditEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "action", "run_link", "user", "reason")
    list_filter = ("action",)
    list_select_related = ("user",)
    search_fields = ("reason", "user__username", "run__workflow")
    fields = readonly_fields = (
        "created_at",
        "action",
        "run_link",
        "step",
        "user",
        "reason",
        "payload_json",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowAuditEntry], search_term: str
    ) -> tuple[QuerySet[WorkflowAuditEntry], bool]:
        matched, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        id_query = run_id_query(search_term)
        if id_query is not None:
            run_ids = WorkflowRun.objects.filter(id_query).values("pk")
            matched = matched | queryset.filter(run__in=run_ids)
        return matched, may_have_duplicates

    @admin.display(description="run", ordering="run")
    def run_link(self, entry: WorkflowAuditEntry) -> SafeString:
        url = run_change_url(self.admin_site, entry.run_id)
        return format_html('<a href="{}">{}</a>', url, short_id(entry.run_id))

    @admin.display(description="payload")
    def payload_json(self, entry: WorkflowAuditEntry) -> SafeString | str:
        return pretty_json(entry.payload)


__all__ = [
    "WorkflowAuditEntryAdmin",
    "WorkflowRunAdmin",
    "WorkflowRunInline",
    "WorkflowStepInline",
    "WorkflowVersionAdmin",
    "format_duration",
    "run_id_query",
]
