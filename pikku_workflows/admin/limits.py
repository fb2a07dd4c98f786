"""Named limits in the admin: each limit's rate, burst and max_running (the code's, or an operator's edit,
which later deploys leave alone) with its live usage; an edit goes through the engine."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..engine.operations.limits import (
    checked_limit_edit,
    get_limit,
    mirror_code_limits,
    update_limit,
)
from ..exceptions import InvalidInput, LimitNotFound
from ..models import WorkflowLimit


class LimitForm(forms.ModelForm):
    """A rate, burst and max_running the engine accepts (`update_limit`'s checks), or the
    form's error. A blank rate keeps the one that applies; a blank max_running is the code's."""

    class Meta:
        model = WorkflowLimit
        fields = ("rate", "burst", "max_running")
        help_texts = {
            "max_running": "At most this many of its step attempts execute at once (blank: the "
            "code's). Raised, it admits waiting attempts at once; lowered, it lets those "
            "executing finish and admits no one until fewer than it execute."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rate"].required = False  # a limit of max_running alone has none

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            checked_limit_edit(
                self.instance.name,
                rate=cleaned.get("rate") or None,
                burst=cleaned.get("burst", 0),
                max_running=cleaned.get("max_running"),
            )
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from exc
        return cleaned


@admin.register(WorkflowLimit)
class WorkflowLimitAdmin(admin.ModelAdmin):
    form = LimitForm
    list_display = ("name", "rate", "burst", "running", "managed_by", "queued", "next_start")
    list_filter = ("managed_by",)
    fields = (
        "name",
        "rate",
        "burst",
        "max_running",
        "running",
        "managed_by",
        "queued",
        "next_start",
    )
    readonly_fields = ("name", "running", "managed_by", "queued", "next_start")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        mirror_code_limits()
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a limit is defined in code (pw.define_limit); the admin edits its rate

    def save_model(self, request: HttpRequest, obj: WorkflowLimit, form: Any, change: bool) -> None:
        update_limit(
            obj.name,
            rate=obj.rate or None,
            burst=obj.burst,
            max_running=obj.max_running,
            by=request.user,
        )

    @admin.display(description="executing / max_running")
    def running(self, limit: WorkflowLimit) -> str:
        try:
            described = get_limit(limit.name)
        except LimitNotFound:  # mirrored from code that no longer defines it
            return "-"
        bound = described["max_running"]
        return "-" if bound is None else f"{described['usage']['running']} / {bound}"

    @admin.display(description="queued by its rate")
    def queued(self, limit: WorkflowLimit) -> int:
        return int(self._usage(limit)["queued"])

    @admin.display(description="next start may begin")
    def next_start(self, limit: WorkflowLimit) -> str:
        return self._usage(limit)["next_start_at"] or "at once"

    def _usage(self, limit: WorkflowLimit) -> dict[str, Any]:
        try:
            return dict(get_limit(limit.name)["usage"])
        except LimitNotFound:  # mirrored from code that no longer defines it
            return {"running": 0, "queued": 0, "next_start_at": None}
