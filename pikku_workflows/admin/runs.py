"""The run admin: a list that says what every run is doing, waiting on or failed with, and a run
page with its steps, attempts, timeline and audit trail. Nothing here writes a run: operator
actions and starts go through the engine (`actions.py`, `start.py`).
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, Prefetch, Q, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _

from ..engine.operations.reads import waiting_on
from ..exceptions import WorkflowCancelled, WorkflowSuspended
from ..models import WorkflowRun, WorkflowStep
from ..querysets import run_id_query
from ..status import RunStatus, StepStatus
from ..waiting import WaitingKind
from .actions import RunOperationsAdmin
from .approvals import APPROVALS_CSS
from .big_lists import EstimatedCountPaginator
from .dashboard import DashboardAdmin
from .display import (
    ADMIN_CSS,
    ADMIN_JS,
    EMPTY,
    describe_waiting,
    format_duration,
    format_moment,
    pretty_error,
    pretty_json,
    run_link,
    short_id,
    status_badge,
)
from .filters import (
    LatestOfChainsFilter,
    RetryingFilter,
    RunLevelFilter,
    StartedFilter,
    StuckFilter,
    VersionFilter,
    WaitingOnFilter,
    WorkflowFilter,
)
from .records import ReadOnlyAdminMixin
from .retention import RunHoldsAdmin
from .run_approvals import AwaitingApprovalFilter
from .run_page import run_page_context
from .start import StartRunAdmin
from .versions import run_graph, run_version
from .workers import worker_warning

# What the list and the run page read of a step to say what the run waits on.
WAITING_STEP_FIELDS = (
    "id",
    "run_id",
    "step_key",
    "kind",
    "status",
    "attempt",
    "attempt_limit",
    "child_run_id",
    "lease_expires_at",
    "wake_at",
    "not_before",
    "admission_hold",
    "created_at",
    "updated_at",
)
RUN_SUMMARY_FIELDS = (
    "id",
    "workflow",
    "version",
    "run_status",
    "waiting",
    "reason_display",
    "error_display",
    "compensation_display",
    "held",
    "progress",
    "started_at",
    "finished",
    "duration",
    "started_by",
    "subject_link",
    "related_runs",
    "graph",
)
RUN_PAYLOAD_FIELDS = ("input", "output", "error", "state")
RUN_DATA_FIELDS = ("input_json", "output_json", "state_json")
RUN_ENGINE_FIELDS = (
    "inline",
    "idempotency_key",
    "idempotency_scope",
    "graph_hash",
    "code_version",
    "planned_steps",
    "lease_holder",
    "lease_expires_at",
    "rerun_requested",
    "wake_at",
    "updated_at",
)
# The request attribute the run list's banner leaves for its rows: was a pikku_worker seen?
WORKERS_SEEN = "pikku_workers_seen"
# A failed run's error in the list, cut to this many characters (the whole of it as a tooltip).
LIST_ERROR_CHARS = 80
# Codes of the reasons an operator or the body gave, shown without a code.
OPERATOR_CODES = (WorkflowSuspended.code, WorkflowCancelled.code)


def unfinished_steps() -> QuerySet[WorkflowStep]:
    """The steps `waiting_on` can name (a succeeded step waits on nothing), in its order."""
    return (
        WorkflowStep.objects.exclude(status=StepStatus.SUCCEEDED)
        .with_clock()
        .order_by("created_at", "step_key")
        .only(*WAITING_STEP_FIELDS)
    )


class WorkflowRunChangeList(ChangeList):
    def get_queryset(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> QuerySet[WorkflowRun]:
        # The list never shows the JSON payloads, which can be large: leave them in the database.
        # One query fetches the unfinished steps of the whole page for the "waiting on" column.
        return (
            super()
            .get_queryset(request, *args, **kwargs)
            .defer(*RUN_PAYLOAD_FIELDS)
            .prefetch_related(
                Prefetch("steps", unfinished_steps(), to_attr="unfinished_steps"), "subject"
            )
        )

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Whether a pikku_worker was seen lately, as the page's banner found (a run waiting for
        # its pass says "none seen" when not).
        seen = getattr(request, WORKERS_SEEN, True)
        for run in self.result_list:
            run.workers_seen = seen

    @cached_property
    def status_summary(self) -> dict[str, Any] | None:
        """Runs per workflow and status among those the filters select: one GROUP BY query;
        None when they are too many to count (the list's count is an estimate)."""
        if self.paginator.estimated:
            return None
        counts = self.queryset.order_by().values_list("workflow", "status").annotate(Count("pk"))
        table: dict[str, dict[str, int]] = {}
        for workflow, status, runs in counts:
            table.setdefault(workflow, {})[status] = runs
        statuses = list(RunStatus)
        rows = [
            {
                "workflow": workflow,
                "url": self.get_query_string({"workflow": workflow}, ["status__exact"]),
                "cells": [
                    {
                        "count": table[workflow].get(status, 0),
                        "url": self.get_query_string(
                            {"workflow": workflow, "status__exact": status.value}
                        ),
                    }
                    for status in statuses
                ],
                "total": sum(table[workflow].values()),
            }
            for workflow in sorted(table)
        ]
        totals = [
            sum(by_status.get(status, 0) for by_status in table.values()) for status in statuses
        ]
        return {
            "statuses": [{"badge": status_badge(s.value, s.label)} for s in statuses],
            "rows": rows,
            "totals": totals,
            "total": sum(totals),
        }


@admin.register(WorkflowRun)
class WorkflowRunAdmin(
    ReadOnlyAdminMixin, StartRunAdmin, DashboardAdmin, RunHoldsAdmin, RunOperationsAdmin
):
    # The list never counts the whole table: exact up to 10,000 runs, estimated past it, and no
    # facet counts beside the filters (big_lists).
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    # Five columns, two lines in some, so that all of them fit a laptop beside the filters.
    list_display = ("short_id", "status_column", "workflow_column", "started", "now_column")
    list_filter = (
        RunLevelFilter,
        "status",
        LatestOfChainsFilter,
        WorkflowFilter,
        WaitingOnFilter,
        AwaitingApprovalFilter,
        RetryingFilter,
        StuckFilter,
        VersionFilter,
        ("created_at", StartedFilter),
    )
    actions = (*RunOperationsAdmin.actions, "hold_runs", "release_runs")
    search_fields = ("workflow", "input")
    search_help_text = "A workflow name, text in the input, or a run id (in full or its start)."
    fieldsets = (
        (None, {"fields": RUN_SUMMARY_FIELDS}),
        ("Data", {"fields": RUN_DATA_FIELDS}),
        ("Engine", {"classes": ("collapse",), "fields": RUN_ENGINE_FIELDS}),
    )
    readonly_fields = RUN_SUMMARY_FIELDS + RUN_DATA_FIELDS + RUN_ENGINE_FIELDS

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS, APPROVALS_CSS)}
        js: ClassVar[tuple[str, ...]] = (ADMIN_JS,)

    def get_fieldsets(self, request: HttpRequest, obj: WorkflowRun | None = None) -> Any:
        """The run page leaves out summary fields that say nothing about this run; a suspended
        or cancelled run shows why as a neutral reason, not as an error."""
        if obj is None:
            return self.fieldsets
        stopped = obj.status in (RunStatus.SUSPENDED, RunStatus.CANCELLED)
        unknown = {
            "waiting": obj.is_settled,
            "reason_display": not (obj.error and stopped),
            "error_display": not obj.error or stopped,
            "compensation_display": obj.compensation is None,
            "held": not obj.retention_hold,
            "finished": obj.finished_at is None,
            "started_by": obj.started_by_id is None,
            "subject_link": obj.subject_type_id is None,
            "graph": not obj.graph_hash,
        }
        summary = tuple(name for name in RUN_SUMMARY_FIELDS if not unknown.get(name, False))
        return ((None, {"fields": summary}), *self.fieldsets[1:])

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowRunChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                # A suspended run waits on its reason, kept in the (deferred) error payload;
                # a failed run's list row shows its error.
                error_message=KT("error__message"),
                error_code=KT("error__code"),
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        warning = worker_warning()
        setattr(request, WORKERS_SEEN, warning is None)
        context = {
            "pikku_worker_warning": warning,
            "pikku_auto_refresh": True,
            "pikku_start_url": self.start_url() if self.has_start_permission(request) else None,
            "pikku_dashboard_url": self.dashboard_url(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

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
            context.update(run_page_context(self, request, obj))
            if not obj.is_settled:
                warning = worker_warning()
                obj.workers_seen = warning is None  # type: ignore[attr-defined]
                context.update(pikku_worker_warning=warning, pikku_auto_refresh=True)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def waiting_on(self, run: WorkflowRun) -> dict[str, Any] | None:
        """The run summary's `waiting_on`, from the steps the list prefetched (or one query)."""
        if run.status == RunStatus.SUSPENDED:
            return {
                "kind": WaitingKind.SUSPEND.value,
                "reason": getattr(run, "error_message", None) or "",
            }
        # The list (which prefetched each row's steps) shows a queued run's key, not who holds
        # it: one query less per queued row; the run page names the holders.
        listed = hasattr(run, "unfinished_steps")
        return waiting_on(run, self._unfinished_steps(run), holders=not listed)

    def _unfinished_steps(self, run: WorkflowRun) -> list[WorkflowStep]:
        steps = getattr(run, "unfinished_steps", None)
        if steps is None:
            steps = run.unfinished_steps = list(unfinished_steps().filter(run=run))  # type: ignore[attr-defined]
        return steps

    def action_checkbox(self, run: WorkflowRun) -> SafeString:
        """Django's selection checkbox, the same markup written directly: rendered through the
        form widget's template it was the list's costliest column (a template per row)."""
        label = format_html(_("Select this object for an action - {}"), str(run))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            run.pk,
            label,
        )

    @admin.display(description="id", ordering="id")
    def short_id(self, run: WorkflowRun) -> SafeString | str:
        if run.parent_run_id is None:
            return short_id(run.id)
        # A child run (a `wf.do` of a workflow), marked so the list reads as a tree.
        return format_html(
            '{} <span class="pikku-chip pikku-child" title="A child run of run {}">child of {}'
            "</span>",
            short_id(run.id),
            run.parent_run_id,
            short_id(run.parent_run_id),
        )

    @admin.display(description="status", ordering="status")
    def run_status(self, run: WorkflowRun) -> SafeString:
        return status_badge(run.status, run.get_status_display())

    @admin.display(description="waiting on")
    def waiting(self, run: WorkflowRun) -> SafeString | str:
        waiting = self.waiting_on(run)
        return describe_waiting(
            self.admin_site,
            waiting,
            since=self._running_since(run, waiting),
            workers_seen=getattr(run, "workers_seen", True),
        )

    def _running_since(self, run: WorkflowRun, waiting: dict[str, Any] | None) -> Any:
        """When the step the run waits on was claimed (its last write before the lease renewals,
        which leave `updated_at` alone), for "running for 18 s"."""
        if (
            not waiting
            or waiting.get("kind") != WaitingKind.STEP
            or run.status != RunStatus.RUNNING
        ):
            return None
        key = waiting.get("step_key")
        step = next((s for s in self._unfinished_steps(run) if s.step_key == key), None)
        return step.updated_at if step is not None and step.status == StepStatus.RUNNING else None

    @admin.display(description="status", ordering="status")
    def status_column(self, run: WorkflowRun) -> SafeString:
        """The status, its progress below."""
        return format_html(
            '{}<div class="pikku-quiet pikku-progress">{}</div>',
            self.run_status(run),
            self.progress(run),
        )

    @admin.display(description="workflow", ordering="workflow")
    def workflow_column(self, run: WorkflowRun) -> SafeString:
        """The workflow, the subject the run is about below."""
        subject = self.subject_link(run) if run.subject_type_id else ""
        return format_html(
            "{}{}",
            run.workflow,
            format_html('<div class="pikku-quiet pikku-subject">{}</div>', subject)
            if subject
            else "",
        )

    @admin.display(description="waiting on / error")
    def now_column(self, run: WorkflowRun) -> SafeString | str:
        """What a live run waits on, or what a failed run failed with."""
        if run.status == RunStatus.FAILED:
            return self.last_error(run)
        return self.waiting(run)

    @admin.display(description="last error")
    def last_error(self, run: WorkflowRun) -> SafeString | str:
        if run.status != RunStatus.FAILED:
            return EMPTY
        message = getattr(run, "error_message", None) or ""
        code = getattr(run, "error_code", None) or "ERROR"
        return format_html(
            '<span class="pikku-last-error" title="{}"><code class="pikku-error-code">{}</code> {}'
            "</span>",
            message,
            code,
            Truncator(message).chars(LIST_ERROR_CHARS),
        )

    @admin.display(description="subject")
    def subject_column(self, run: WorkflowRun) -> SafeString | str:
        return self.subject_link(run)

    @admin.display(description="progress")
    def progress(self, run: WorkflowRun) -> SafeString | str:
        """Steps done of those planned; a completed run whose body did without some planned
        steps reads as done ("5 / 5"), saying so in words."""
        done = run.steps_done
        if not run.planned_steps:
            return f"{done} done"
        skipped = len(run.planned_steps) - done
        if run.status == RunStatus.COMPLETED and skipped > 0:
            return format_html(
                '{} / {} <span class="pikku-quiet" title="{}">({} skipped)</span>',
                done,
                done,
                "Planned steps the body did not need on this run",
                skipped,
            )
        return f"{done} / {len(run.planned_steps)}"

    @admin.display(description="started", ordering="created_at")
    def started(self, run: WorkflowRun) -> SafeString:
        """When, and how long it took (or has taken so far) below."""
        return format_html(
            '{}<div class="pikku-quiet pikku-duration">{}</div>',
            format_moment(run.created_at),
            self.duration(run),
        )

    @admin.display(description="started")
    def started_at(self, run: WorkflowRun) -> SafeString:
        return _exact_and_relative(run.created_at)

    @admin.display(description="finished")
    def finished(self, run: WorkflowRun) -> SafeString | str:
        return _exact_and_relative(run.finished_at) if run.finished_at else EMPTY

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

    @admin.display(description="related runs")
    def related_runs(self, run: WorkflowRun) -> SafeString | str:
        """Parent, source of a fork, children, forks, and the previous and next runs of a chain
        (`wf.continue_as_new`): one query."""
        near = Q(parent_run=run) | Q(forked_from=run) | Q(continued_from=run)
        linked = [run.parent_run_id, run.forked_from_id, run.continued_from_id]
        if any(linked):
            near |= Q(pk__in=[pk for pk in linked if pk])
        related = WorkflowRun.objects.filter(near).only(
            "id",
            "workflow",
            "status",
            "parent_run_id",
            "forked_from_id",
            "continued_from_id",
            "created_at",
        )
        groups: dict[str, list[WorkflowRun]] = {}
        for other in related.order_by("created_at"):
            for role, matches in (
                ("parent", other.pk == run.parent_run_id),
                ("forked from", other.pk == run.forked_from_id),
                ("child", other.parent_run_id == run.pk),
                ("fork", other.forked_from_id == run.pk),
                ("previous", other.pk == run.continued_from_id),
                ("next", other.continued_from_id == run.pk),
            ):
                if matches:
                    groups.setdefault(role, []).append(other)
        if not groups:
            return EMPTY
        return format_html(
            '<dl class="pikku-related">{}</dl>',
            format_html_join(
                "",
                "<dt>{}</dt><dd>{}</dd>",
                ((role, self._run_chips(runs)) for role, runs in groups.items()),
            ),
        )

    def _run_chips(self, runs: list[WorkflowRun]) -> SafeString:
        return format_html_join(
            " ",
            '<span class="pikku-chip">{} {} {}</span>',
            (
                (
                    run_link(self.admin_site, r.pk),
                    r.workflow,
                    status_badge(r.status, r.get_status_display()),
                )
                for r in runs
            ),
        )

    @admin.display(description="version")
    def version(self, run: WorkflowRun) -> SafeString | str:
        return run_version(self.admin_site, run)

    @admin.display(description="graph")
    def graph(self, run: WorkflowRun) -> SafeString | str:
        return run_graph(run)

    @admin.display(description="error")
    def error_display(self, run: WorkflowRun) -> SafeString | str:
        return pretty_error(run.error)

    @admin.display(description="compensation")
    def compensation_display(self, run: WorkflowRun) -> SafeString | str:
        """Undoing the succeeded steps (`compensate=`): where it stands, and what for."""
        if run.compensation is None:
            return EMPTY
        cause = (run.compensation_cause or {}).get("message", "")
        return format_html(
            '{} <span class="pikku-quiet">{}</span>',
            status_badge(run.compensation, run.get_compensation_display()),
            f"undoing the steps for: {cause}" if cause else "",
        )

    @admin.display(description="retention")
    def held(self, run: WorkflowRun) -> str:
        return "Held: never purged until released" if run.retention_hold else ""

    @admin.display(description="reason")
    def reason_display(self, run: WorkflowRun) -> SafeString | str:
        """Why the run is suspended or cancelled: an operator's words, `wf.suspend`'s reason, or
        what the engine is waiting for (a step function to deploy), with its code."""
        error = run.error or {}
        code = error.get("code")
        return format_html(
            '<div class="pikku-reason">{}{}</div>',
            format_html('<code class="pikku-reason-code">{}</code> ', code)
            if code and code not in OPERATOR_CODES
            else "",
            error.get("message") or EMPTY,
        )

    @admin.display(description="input")
    def input_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.input)

    @admin.display(description="output")
    def output_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.output)

    @admin.display(description="state")
    def state_json(self, run: WorkflowRun) -> SafeString | str:
        return pretty_json(run.state)


def _exact_and_relative(moment: datetime) -> SafeString:
    exact = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return format_html("{} ({})", exact, format_moment(moment))
