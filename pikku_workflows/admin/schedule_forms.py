"""The schedule admin's forms: the definition (checked by the engine's own rules, each problem
on its field, with a preview of the next 10 fire times), a pause's note, a backfill's range."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils import timezone

from ..models import WorkflowSchedule
from ..registry import registry
from ..schedules.choices import Reprocess
from ..schedules.preview import PreviewTime, preview
from ..schedules.spec import ScheduleInvalid, ScheduleSpec, every_text, parse_schedule

# The submit button that previews the fire times of the typed definition without saving it.
PREVIEW = "_preview"
PREVIEW_COUNT = 10

# The form fields the engine's definition reads, and the model fields they fill.
DURATION_FIELDS = {
    "every": "every_ms",
    "catch_up_window": "catch_up_window_ms",
    "jitter": "jitter_ms",
}


class ScheduleForm(forms.ModelForm):
    """A schedule's definition. Durations are written as "90m", "1d" or milliseconds."""

    workflow = forms.ChoiceField(choices=())
    every = forms.CharField(required=False, help_text='An interval ("15m", "1d"); or give cron.')
    catch_up_window = forms.CharField(initial="1h", help_text='"1h", "30m", milliseconds.')
    jitter = forms.CharField(required=False, help_text="Each fire delayed by up to this.")
    input = forms.JSONField(required=False)

    class Meta:
        model = WorkflowSchedule
        fields = (
            "name",
            "workflow",
            "cron",
            "every",
            "timezone",
            "input",
            "overlap",
            "catch_up",
            "catch_up_window",
            "catch_up_max",
            "jitter",
            "start_at",
            "end_at",
            "pause_on_failure",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(registry.workflows)
        current = self.instance.workflow if self.instance.pk else None
        if current and current not in names:
            names.append(current)
        workflow = self.fields["workflow"]
        assert isinstance(workflow, forms.ChoiceField)
        workflow.choices = [(name, name) for name in names]
        self.fields["cron"].help_text = 'Five fields, e.g. "0 2 * * *"; or give every.'
        if self.instance.pk:
            self.fields["name"].disabled = True
            for field, column in DURATION_FIELDS.items():
                self.initial[field] = every_text(getattr(self.instance, column))
        self.spec: ScheduleSpec | None = None
        self.preview_times: list[PreviewTime] = []

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        fields = {
            key: cleaned.get(key) or None
            for key in ("cron", "every", "jitter", "start_at", "end_at")
        }
        fields.update(
            timezone=cleaned.get("timezone") or "UTC",
            input=cleaned.get("input"),
            overlap=cleaned.get("overlap"),
            catch_up=cleaned.get("catch_up"),
            catch_up_window=cleaned.get("catch_up_window") or "1h",
            catch_up_max=cleaned.get("catch_up_max"),
            pause_on_failure=bool(cleaned.get("pause_on_failure")),
        )
        name = cleaned.get("name") or self.instance.name
        try:
            self.spec = parse_schedule(
                name, cleaned.get("workflow"), fields, workflow_exists=registry.is_workflow
            )
        except ScheduleInvalid as exc:
            for field, messages in exc.fields.items():
                for message in messages:
                    self.add_error(field if field in self.fields else None, message)
            return cleaned
        # The model's own checks (cron or every) see the parsed values.
        for column in DURATION_FIELDS.values():
            setattr(self.instance, column, getattr(self.spec, column))
        if PREVIEW in self.data:
            # Shown, not saved: the page comes back with the fire times of what was typed.
            self.preview_times = preview(self.spec.rule, timezone.now(), PREVIEW_COUNT)
            raise forms.ValidationError("Previewed below; not saved yet.", code="preview")
        return cleaned

    def engine_fields(self) -> dict[str, Any]:
        """What the engine's create or update takes, from the checked definition."""
        assert self.spec is not None
        fields = self.spec.fields()
        fields.pop("paused")
        return fields


class PauseForm(forms.Form):
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))


class BackfillForm(forms.Form):
    start = forms.DateTimeField(help_text="The first nominal time it may start (inclusive).")
    end = forms.DateTimeField(help_text="Nominal times before this (exclusive).")
    reprocess = forms.ChoiceField(choices=Reprocess.choices, initial=Reprocess.MISSING)
    max_active = forms.IntegerField(min_value=1, max_value=1000, initial=1)
