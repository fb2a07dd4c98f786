"""Starting a run from the admin: a page listing the registered workflows with a JSON input box
(`add_workflowrun` permission; `started_by` recorded), reached from the run list or, for one
subject, from a host model's inline (`WorkflowRunInline.start_workflows`). The run is queued:
a web request never runs a workflow body.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

import pikku_workflows as pw

from ..models import WorkflowVersion
from ..registry import registry
from ..serialization import NestedTooDeeply, loads_json
from .display import run_change_url, run_link

START_TEMPLATE = "admin/pikku_workflows/workflowrun/start_run.html"


class StartRunForm(forms.Form):
    workflow = forms.ChoiceField(widget=forms.RadioSelect, label="Workflow")
    input = forms.CharField(
        label="Input (JSON)",
        initial="{}",
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 70, "spellcheck": "false"}),
        help_text="The workflow's input as JSON; empty means null.",
    )
    subject = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        workflow = self.fields["workflow"]
        assert isinstance(workflow, forms.ChoiceField)
        workflow.choices = [(name, name) for name in sorted(registry.workflows)]

    def clean_input(self) -> Any:
        text = self.cleaned_data["input"].strip()
        if not text:
            return None
        try:
            return loads_json(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
            ) from exc
        except NestedTooDeeply as exc:
            raise forms.ValidationError(f"Not storable JSON: {exc}.") from exc


def subject_reference(obj: Any) -> str:
    """How the start page names a subject: `<content type id>:<pk>`."""
    return f"{ContentType.objects.get_for_model(obj).pk}:{obj.pk}"


def start_query(workflow: str, subject: Any = None, input: Any = None) -> str:
    """The query string of the start page preselecting `workflow` (and its subject and input)."""
    query = {"workflow": workflow}
    if subject is not None:
        query["subject"] = subject_reference(subject)
    if input is not None:
        query["input"] = json.dumps(input, indent=2, ensure_ascii=False, default=str)
    return urlencode(query)


class StartRunAdmin(admin.ModelAdmin):
    """The "Start a run" page of the run admin."""

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_start"
        own = [path("start/", self.admin_site.admin_view(self.start_view), name=name)]
        return own + super().get_urls()

    def start_url(self) -> str:
        opts = self.opts
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_start")

    def has_start_permission(self, request: HttpRequest) -> bool:
        codename = get_permission_codename("add", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def start_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_start_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else None
        form = StartRunForm(data, initial=self._initial(request))
        subject = self._subject(request, (data or request.GET).get("subject", ""))
        if form.is_valid():
            try:
                run_id = pw.start_workflow(
                    form.cleaned_data["workflow"],
                    form.cleaned_data["input"],
                    started_by=request.user,
                    subject=subject,
                )
            except pw.WorkflowError as exc:
                form.add_error("input" if exc.code == pw.InvalidInput.code else None, str(exc))
            else:
                message = format_html(
                    "Started run {} of {}: it is queued for a worker.",
                    run_link(self.admin_site, run_id),
                    form.cleaned_data["workflow"],
                )
                self.message_user(request, message, messages.SUCCESS)
                return HttpResponseRedirect(run_change_url(self.admin_site, run_id))
        return self._render(request, form, subject)

    def _initial(self, request: HttpRequest) -> dict[str, Any]:
        initial = {"subject": request.GET.get("subject", "")}
        if request.GET.get("workflow") in registry.workflows:
            initial["workflow"] = request.GET["workflow"]
        elif len(registry.workflows) == 1:
            initial["workflow"] = next(iter(registry.workflows))
        if "input" in request.GET:
            initial["input"] = request.GET["input"]
        return initial

    def _subject(self, request: HttpRequest, reference: str) -> Any:
        """The object `reference` names, if the user may view it; no reference: None."""
        if not reference:
            return None
        content_type_id, _, pk = reference.partition(":")
        try:
            content_type = ContentType.objects.get_for_id(int(content_type_id))
            subject = content_type.get_object_for_this_type(pk=pk)
        except (ValueError, ObjectDoesNotExist) as exc:
            raise PermissionDenied("No such subject.") from exc
        meta = subject._meta
        allowed = [
            f"{meta.app_label}.{get_permission_codename(action, meta)}"
            for action in ("view", "change")
        ]
        if not any(request.user.has_perm(permission) for permission in allowed):
            raise PermissionDenied
        return subject

    def _render(self, request: HttpRequest, form: StartRunForm, subject: Any) -> TemplateResponse:
        workflows = [
            {
                "name": name,
                "kind": WorkflowVersion.Kind(definition.kind).label,
                "planned_steps": definition.planned_steps or [],
            }
            for name, definition in sorted(registry.workflows.items())
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Start a run",
            "subtitle": None,
            "opts": self.opts,
            "form": form,
            # The radio buttons and the workflows are both in name order.
            "workflows": list(zip(form["workflow"], workflows, strict=True)),
            "subject": subject,
            "media": self.media + form.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, START_TEMPLATE, context)
