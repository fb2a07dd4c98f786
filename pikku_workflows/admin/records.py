"""The read-only base of every pikku admin, the admins of versions and audit entries, and the
inline that lists a host object's runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.contenttypes.admin import GenericTabularInline
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import WorkflowAuditEntry, WorkflowRun, WorkflowVersion
from ..querysets import run_id_query
from .display import ADMIN_CSS, pretty_json, run_link, status_badge
from .versions import version_graph

# A version's graph in the list is a thumbnail; its page shows it full size.
PREVIEW_WIDTH = 280


class ReadOnlyAdminMixin:
    """Viewable by whoever holds the view permission; nobody adds, edits or deletes here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WorkflowRunInline(ReadOnlyAdminMixin, GenericTabularInline):
    """The runs about an object (`pw.start_workflow(..., subject=obj)`), for the host's own admin.

    Visible to users holding the run view permission: `inlines = [WorkflowRunInline]`. A host
    opts in to starting runs from it: list the workflows in `start_workflows` (and override
    `start_input(obj, workflow)` to prefill their input); users who may add runs then see a
    "Start <workflow>" link for the object, to the admin's start page.
    """

    template = "admin/pikku_workflows/edit_inline/workflow_runs.html"
    start_workflows: Sequence[str] = ()
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

    def start_input(self, obj: Any, workflow: str) -> Any:
        """The input the start page offers for a run of `workflow` about `obj` (None: `{}`)."""
        return None

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        formset.pikku_start_links = self.start_links(request, obj)  # type: ignore[attr-defined]
        return formset

    def start_links(self, request: HttpRequest, obj: Any) -> list[tuple[str, str]]:
        """(label, url) of each "Start <workflow>" link for `obj`; none without the permission."""
        from .start import start_query

        if obj is None or obj.pk is None or not self.start_workflows:
            return []
        if not request.user.has_perm("pikku_workflows.add_workflowrun"):
            return []
        try:
            url = reverse(f"{self.admin_site.name}:pikku_workflows_workflowrun_start")
        except NoReverseMatch:
            return []
        return [
            (f"Start {name}", f"{url}?{start_query(name, obj, self.start_input(obj, name))}")
            for name in self.start_workflows
        ]

    @admin.display(description="run")
    def run_link(self, run: WorkflowRun) -> SafeString:
        return run_link(self.admin_site, run.pk)

    @admin.display(description="status")
    def run_status(self, run: WorkflowRun) -> SafeString:
        return status_badge(run.status, run.get_status_display())


@admin.register(WorkflowVersion)
class WorkflowVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("name", "kind", "status", "short_hash", "runs", "created_at", "graph_preview")
    list_filter = ("kind", "status")
    search_fields = ("name", "graph_hash")
    fields = readonly_fields = (
        "name",
        "kind",
        "status",
        "graph_hash",
        "code_version",
        "created_at",
        "runs",
        "graph",
        "definition_json",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS,)}

    @admin.display(description="version", ordering="graph_hash")
    def short_hash(self, version: WorkflowVersion) -> str:
        return version.graph_hash[:12]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowVersion]:
        # The runs column is counted in the list query itself.
        started = (
            WorkflowRun.objects.filter(
                workflow=OuterRef("name"), code_version=OuterRef("graph_hash")
            )
            .order_by()
            .values("workflow")
            .annotate(count=Count("pk"))
            .values("count")
        )
        return super().get_queryset(request).annotate(run_count=Coalesce(Subquery(started), 0))

    @admin.display(description="runs started on it")
    def runs(self, version: WorkflowVersion) -> SafeString | str:
        count = getattr(version, "run_count", 0)
        try:
            url = reverse(f"{self.admin_site.name}:pikku_workflows_workflowrun_changelist")
        except NoReverseMatch:
            return str(count)
        query = urlencode({"version": f"{version.name}@{version.graph_hash}"})
        return format_html('<a href="{}?{}">{}</a>', url, query, count)

    @admin.display(description="graph")
    def graph_preview(self, version: WorkflowVersion) -> SafeString | str:
        return version_graph(version, max_width=PREVIEW_WIDTH)

    @admin.display(description="graph")
    def graph(self, version: WorkflowVersion) -> SafeString | str:
        return version_graph(version)

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
        return run_link(self.admin_site, entry.run_id)

    @admin.display(description="payload")
    def payload_json(self, entry: WorkflowAuditEntry) -> SafeString | str:
        return pretty_json(entry.payload)
