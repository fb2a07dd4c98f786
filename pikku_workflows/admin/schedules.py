"""The Schedules admin: the list (next fire in local time and UTC, last tick outcome, paused,
flagged when `skip` skipped many ticks in a row), the edit form (every problem on its field,
the next 10 fire times previewed with DST shifts marked), pause with a note, resume, trigger
and backfill (its dry-run count first), bulk pause and resume, and the latest ticks with why
each was skipped or missed. Every change goes through the engine's schedule operations."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

import pikku_workflows as pw

from ..engine.operations.schedules import code_differs
from ..models import WorkflowSchedule, WorkflowScheduleTick
from ..schedules import wall_clock
from ..schedules.choices import Overlap
from ..schedules.preview import PreviewTime, preview
from .display import ADMIN_CSS
from .schedule_forms import BackfillForm, PauseForm, ScheduleForm

# A `skip` schedule that skipped more ticks than this in a row is flagged on the list: a run
# that never ends would otherwise silently drop every later tick.
SKIPPED_IN_A_ROW_FLAG = 3
TICKS_SHOWN = 50
PREVIEW_COUNT = 10
_MICROSECOND = timedelta(microseconds=1)


@admin.register(WorkflowSchedule)
class WorkflowScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("name", "workflow", "rule", "next_fire", "last_outcome", "state", "managed")
    list_filter = ("paused", "managed_by", "last_outcome", "overlap")
    search_fields = ("name", "workflow")
    list_per_page = 100
    show_full_result_count = False
    actions = ("pause_schedules", "resume_schedules", "trigger_schedules")
    readonly_fields = ("fire_time_preview", "latest_ticks")
    change_form_template = "admin/pikku_workflows/workflowschedule/change_form.html"

    class Media:
        css: dict[str, tuple[str, ...]] = {"all": (ADMIN_CSS,)}

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        definition = list(ScheduleForm.Meta.fields)
        sets: list[Any] = [(None, {"fields": definition})]
        if obj is not None:
            sets.append(("Next fire times", {"fields": ("fire_time_preview",)}))
            sets.append(("Latest ticks", {"fields": ("latest_ticks",)}))
        return sets

    # --- the list ---------------------------------------------------------------------

    @admin.display(description="rule")
    def rule(self, schedule: WorkflowSchedule) -> str:
        when = schedule.cron or f"every {_every(schedule.every_ms)}"
        return f"{when} ({schedule.timezone})"

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, schedule: WorkflowSchedule) -> SafeString | str:
        if schedule.next_fire_at is None:
            return "no tick left"
        local = schedule.next_fire_at.astimezone(wall_clock.zone_of(schedule.timezone))
        return format_html(
            "{}<br><small>{} UTC</small>",
            local.strftime("%Y-%m-%d %H:%M:%S %Z"),
            schedule.next_fire_at.astimezone(wall_clock.zone_of("UTC")).strftime(
                "%Y-%m-%d %H:%M:%S"
            ),
        )

    @admin.display(description="state", ordering="paused")
    def state(self, schedule: WorkflowSchedule) -> SafeString:
        parts = []
        if schedule.paused:
            parts.append(
                format_html(
                    '<span class="pikku-badge pikku-paused" title="{}">paused</span>',
                    schedule.pause_note,
                )
            )
        else:
            parts.append(mark_safe('<span class="pikku-badge pikku-active">active</span>'))
        if schedule.overlap == Overlap.SKIP and schedule.skipped_in_a_row > SKIPPED_IN_A_ROW_FLAG:
            parts.append(
                format_html(
                    '<span class="pikku-badge pikku-flag" title="{}">skipped {} in a row</span>',
                    "overlap=skip: a run of it is still going and every tick since was skipped",
                    schedule.skipped_in_a_row,
                )
            )
        return format_html_join(" ", "{}", ((part,) for part in parts))

    @admin.display(description="managed by")
    def managed(self, schedule: WorkflowSchedule) -> SafeString | str:
        if code_differs(schedule):
            return format_html(
                '{} <span class="pikku-badge pikku-flag">code differs</span>', "admin"
            )
        return schedule.get_managed_by_display()

    # --- the change page ----------------------------------------------------------------

    @admin.display(description="next 10")
    def fire_time_preview(self, schedule: WorkflowSchedule) -> SafeString:
        if schedule.next_nominal_at is None:
            return mark_safe("<p>No tick is left before end_at.</p>")
        from ..engine.store.schedule_rows import spec_of

        after = schedule.next_nominal_at - _MICROSECOND
        return preview_table(preview(spec_of(schedule).rule, after, PREVIEW_COUNT))

    @admin.display(description="ticks")
    def latest_ticks(self, schedule: WorkflowSchedule) -> SafeString:
        ticks = WorkflowScheduleTick.objects.filter(schedule=schedule).order_by("-nominal_at")
        rows = [
            (tick.nominal_at.isoformat(), tick.outcome, _run_link(tick.run_id), tick.reason)
            for tick in ticks.only("nominal_at", "outcome", "run_id", "reason")[:TICKS_SHOWN]
        ]
        if not rows:
            return mark_safe("<p>No tick yet.</p>")
        body = format_html_join(
            "",
            '<tr class="pikku-tick-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            ((outcome, at, outcome, link, reason) for at, outcome, link, reason in rows),
        )
        return format_html(
            '<table class="pikku-ticks"><thead><tr><th>nominal time</th><th>outcome</th>'
            "<th>run</th><th>why</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: Any = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> Any:
        context = {**(extra_context or {}), "schedule_tools": object_id is not None}
        return super().changeform_view(request, object_id, form_url, context)

    def save_model(
        self, request: HttpRequest, obj: WorkflowSchedule, form: Any, change: bool
    ) -> None:
        fields = form.engine_fields()
        if change:
            pw.update_schedule(obj.name, by=request.user, workflow=form.spec.workflow, **fields)
        else:
            pw.create_schedule(form.spec.name, form.spec.workflow, by=request.user, **fields)
        obj.pk = WorkflowSchedule.objects.get(name=form.spec.name).pk

    def delete_model(self, request: HttpRequest, obj: WorkflowSchedule) -> None:
        pw.delete_schedule(obj.name, by=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowSchedule]) -> None:
        for name in queryset.values_list("name", flat=True):
            pw.delete_schedule(name, by=request.user)

    # --- actions --------------------------------------------------------------------------

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[WorkflowSchedule]) -> None:
        names = list(queryset.filter(paused=False).values_list("name", flat=True))
        for name in names:
            pw.pause_schedule(
                name, note=f"Paused from the admin by {request.user}.", by=request.user
            )
        self.message_user(request, f"Paused {len(names)} schedule(s).", messages.SUCCESS)

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[WorkflowSchedule]) -> None:
        names = list(queryset.filter(paused=True).values_list("name", flat=True))
        for name in names:
            pw.resume_schedule(name, by=request.user)
        self.message_user(request, f"Resumed {len(names)} schedule(s).", messages.SUCCESS)

    @admin.action(description="Trigger the selected schedules now", permissions=["change"])
    def trigger_schedules(self, request: HttpRequest, queryset: QuerySet[WorkflowSchedule]) -> None:
        started, held = 0, []
        for name in queryset.values_list("name", flat=True):
            if pw.trigger_schedule(name, by=request.user):
                started += 1
            else:
                held.append(name)
        self.message_user(request, f"Started {started} run(s).", messages.SUCCESS)
        if held:
            self.message_user(
                request,
                f"Not started (overlap=skip, a run still going): {', '.join(held)}.",
                messages.WARNING,
            )

    # --- pause with a note, resume, trigger, backfill: pages of one schedule --------------

    def get_urls(self) -> list[Any]:
        own = [
            path(
                f"<path:object_id>/{verb}/",
                self.admin_site.admin_view(view),
                name=f"pikku_workflows_workflowschedule_{verb}",
            )
            for verb, view in (
                ("pause", self.pause_view),
                ("resume", self.resume_view),
                ("trigger", self.trigger_view),
                ("backfill", self.backfill_view),
            )
        ]
        return own + super().get_urls()

    def _schedule_for_change(self, request: HttpRequest, object_id: str) -> WorkflowSchedule:
        schedule = get_object_or_404(WorkflowSchedule, pk=object_id)
        if not self.has_change_permission(request, schedule):
            raise PermissionDenied
        return schedule

    def _back(self, schedule: WorkflowSchedule) -> HttpResponseRedirect:
        return HttpResponseRedirect(
            reverse("admin:pikku_workflows_workflowschedule_change", args=[schedule.pk])
        )

    def pause_view(self, request: HttpRequest, object_id: str) -> Any:
        schedule = self._schedule_for_change(request, object_id)
        form = PauseForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            pw.pause_schedule(schedule.name, note=form.cleaned_data["note"], by=request.user)
            self.message_user(request, f"Paused {schedule.name}.", messages.SUCCESS)
            return self._back(schedule)
        return self._page(request, schedule, "Pause", form)

    def resume_view(self, request: HttpRequest, object_id: str) -> Any:
        schedule = self._schedule_for_change(request, object_id)
        if request.method == "POST":
            pw.resume_schedule(schedule.name, by=request.user)
            self.message_user(request, f"Resumed {schedule.name}.", messages.SUCCESS)
        return self._back(schedule)

    def trigger_view(self, request: HttpRequest, object_id: str) -> Any:
        schedule = self._schedule_for_change(request, object_id)
        if request.method == "POST":
            run_id = pw.trigger_schedule(
                schedule.name, force="force" in request.POST, by=request.user
            )
            if run_id:
                self.message_user(request, f"Started run {run_id}.", messages.SUCCESS)
            else:
                self.message_user(
                    request,
                    "Not started: overlap=skip and a run of it is still going.",
                    messages.WARNING,
                )
        return self._back(schedule)

    def backfill_view(self, request: HttpRequest, object_id: str) -> Any:
        schedule = self._schedule_for_change(request, object_id)
        form = BackfillForm(request.POST or None)
        counted = None
        if request.method == "POST" and form.is_valid():
            options = dict(form.cleaned_data)
            try:
                counted = pw.backfill_schedule(
                    schedule.name, dry_run="confirm" not in request.POST, by=request.user, **options
                )
            except pw.InvalidInput as exc:
                for problem in exc.problems:
                    field, _, message = problem.partition(": ")
                    form.add_error(field if field in form.fields else None, message or problem)
            else:
                if "confirm" in request.POST:
                    self.message_user(
                        request,
                        f"Backfill {counted['backfill']} starts {counted['count']} runs of {schedule.name}.",
                        messages.SUCCESS,
                    )
                    return self._back(schedule)
        return self._page(request, schedule, "Backfill", form, counted=counted)

    def _page(
        self,
        request: HttpRequest,
        schedule: WorkflowSchedule,
        title: str,
        form: Any,
        **context: Any,
    ) -> TemplateResponse:
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request,
            "admin/pikku_workflows/workflowschedule/schedule_action.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "schedule": schedule,
                "title": f"{title} {schedule.name}",
                "action": title,
                "form": form,
                "change_url": reverse(
                    "admin:pikku_workflows_workflowschedule_change", args=[schedule.pk]
                ),
                **context,
            },
        )


def preview_table(times: list[PreviewTime]) -> SafeString:
    """The fire times as a table: local, UTC, and a mark where a DST change moved one."""
    rows = format_html_join(
        "",
        "<tr{}><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                mark_safe(' class="pikku-dst-shift"') if moment.dst_note else "",
                moment.local.strftime("%Y-%m-%d %H:%M:%S %Z"),
                moment.at.strftime("%Y-%m-%d %H:%M:%S"),
                moment.dst_note,
            )
            for moment in times
        ),
    )
    return format_html(
        '<table class="pikku-fire-times"><thead><tr><th>local</th><th>UTC</th><th>DST</th></tr>'
        "</thead><tbody>{}</tbody></table>",
        rows,
    )


def _every(every_ms: int | None) -> str:
    from ..schedules.spec import every_text

    return every_text(every_ms) or "-"


def _run_link(run_id: Any) -> SafeString | str:
    if run_id is None:
        return "-"
    url = reverse("admin:pikku_workflows_workflowrun_change", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, str(run_id)[:8])
