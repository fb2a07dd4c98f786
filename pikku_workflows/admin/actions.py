"""Operator actions on runs from the admin: cancel, suspend, resume, retry (bulk and single) and
fork (single). Each shows a confirmation page that sorts the runs into eligible and not (and
why), asks for a reason, then calls the engine operation once per run, reporting every skip or
refusal with `message_user`. The engine alone validates, writes and audits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

import pikku_workflows as pw

from ..engine.operations.control import FORK, OPERATION_RULES, RETRY, split_for_fork
from ..engine.operations.rules import Rule
from ..models import WorkflowRun
from ..status import Compensation, StepStatus
from ..step_keys import is_engine_key
from .display import run_change_url, run_link, short_id, status_badge

CONFIRMATION_TEMPLATE = "admin/pikku_workflows/workflowrun/confirm_operation.html"
# Runs named one by one in a message; the rest are counted.
NAMED_IN_MESSAGE = 10
# Up to this many steps the fork page's preview follows the choice of step without a reload.
FORK_PREVIEW_CHOICES = 100


@dataclass(frozen=True)
class Operation:
    """An engine operation as the admin offers it: its row of the operations table
    (`rules.Rule`: function, permission, status rule) and how the admin words it."""

    engine_rule: Rule

    @property
    def name(self) -> str:
        return self.engine_rule.action

    @property
    def label(self) -> str:
        return self.name.capitalize()

    @property
    def bulk(self) -> bool:
        """Offered as an action on the selected runs (else only as a button on the run page)."""
        return self.engine_rule.bulk

    @property
    def forks(self) -> bool:
        """It asks for a step to execute again from and ends on the new run it starts."""
        return self.engine_rule is FORK

    @property
    def warning(self) -> str:
        """What the confirmation page warns about before the operator says yes."""
        return self.engine_rule.caution

    @property
    def done(self) -> str:
        return self.engine_rule.past

    @property
    def sources(self) -> frozenset[str]:
        """The statuses it moves a run from (a preview: the engine decides)."""
        return self.engine_rule.sources

    @property
    def target(self) -> str | None:
        """The status it leaves the run in: already there means nothing to do."""
        return self.engine_rule.target

    @property
    def rule(self) -> str:
        return self.engine_rule.requirement

    @property
    def action_name(self) -> str:
        return f"{self.name}_runs" if self.bulk else f"{self.name}_run"

    def ineligibility(self, status: str) -> str | None:
        """None when a run in `status` is eligible; otherwise why not."""
        return self.engine_rule.ineligibility(status)


OPERATIONS = {rule.action: Operation(rule) for rule in OPERATION_RULES.values()}


def selection_action(operation: Operation) -> Callable[..., Any]:
    """The changelist action of a bulk operation (`cancel_runs`); `get_actions` offers it only
    to users with the operation's permission."""

    def act(
        modeladmin: RunOperationsAdmin, request: HttpRequest, queryset: QuerySet[WorkflowRun]
    ) -> Any:
        return modeladmin.operate_on_selection(request, queryset, operation)

    act.__name__ = act.__qualname__ = operation.action_name
    return admin.action(description=f"{operation.label} selected runs…")(act)


class OperationForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="Recorded in the audit trail with your username.",
    )

    def __init__(
        self, *args: Any, operation: Operation, steps: Sequence[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        for flag in operation.engine_rule.flags:
            self.fields[flag.name] = forms.BooleanField(
                required=False, label=flag.label, help_text=flag.help
            )
        if operation.forks:
            self.fields["from_step"] = forms.ChoiceField(
                label="Execute again from step",
                choices=[(key, key) for key in steps if not is_engine_key(key)],
                help_text="Steps before it keep their recorded results in the new run; "
                "this step and every later one run again.",
            )


@dataclass
class Outcome:
    done: list[tuple[WorkflowRun, Any]]
    skipped: list[tuple[WorkflowRun, str]]
    failed: list[tuple[WorkflowRun, pw.WorkflowError]]


def _label(operation: Operation, run: WorkflowRun) -> str:
    """A retry of a run whose compensation failed retries the compensations, not the body."""
    if operation.name == RETRY.action and run.compensation == Compensation.FAILED:
        return "Retry compensation"
    return operation.label


class RunOperationsAdmin(admin.ModelAdmin):
    """The operator actions of the run admin, each gated by its own model permission."""

    # Permissions are judged in `get_actions`: Django's `@admin.action(permissions=[...])` asks
    # one `has_<name>_permission` method per name, which the table would have to spell again.
    actions = tuple(selection_action(op) for op in OPERATIONS.values() if op.bulk)

    def has_operation_permission(self, request: HttpRequest, operation: Operation) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{operation.engine_rule.permission}")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 asks for actions per location (list or change form); 5.2 knows only the list.
        where = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **where)
        for operation in OPERATIONS.values():
            if not self.has_operation_permission(request, operation):
                actions.pop(operation.action_name, None)
        return actions

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_operation"
        view = self.admin_site.admin_view(self.operation_view)
        own = [path("<uuid:run_id>/operations/<slug:operation>/", view, name=name)]
        return own + super().get_urls()

    def operation_url(self, run_id: Any, operation: Operation) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_operation"
        return reverse(name, args=[run_id, operation.name])

    def run_operations(self, request: HttpRequest, run: WorkflowRun) -> list[dict[str, Any]]:
        """The buttons of the run page: operations the user may use that apply to the run now."""
        return [
            {"name": op.name, "label": _label(op, run), "url": self.operation_url(run.pk, op)}
            for op in OPERATIONS.values()
            if op.ineligibility(run.status) is None and self.has_operation_permission(request, op)
        ]

    def operate_on_selection(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], operation: Operation
    ) -> TemplateResponse | None:
        """A bulk action: the confirmation page, then (on its POST) the operation."""
        runs = list(queryset.order_by("-created_at"))
        confirmed = request.POST.get("confirmed") == "yes"
        form = OperationForm(request.POST if confirmed else None, operation=operation)
        if form.is_valid():
            self.report(
                request, operation, self.perform(request, operation, runs, form.cleaned_data)
            )
            return None  # back to the list
        return self.render_confirmation(request, operation, runs, form, bulk=True)

    def operation_view(self, request: HttpRequest, run_id: Any, operation: str) -> HttpResponse:
        """A single-run operation, from a button on the run page."""
        chosen = OPERATIONS.get(operation)
        if chosen is None:
            raise Http404(f"No operation {operation!r}.")
        run = self.get_object(request, str(run_id))
        if run is None:
            raise Http404("No such run.")
        if not (
            self.has_view_permission(request, run)
            and self.has_operation_permission(request, chosen)
        ):
            raise PermissionDenied
        steps = list(run.steps.order_by("created_at", "step_key").values_list("step_key", "status"))
        data = request.POST if request.method == "POST" else None
        keys = [key for key, _ in steps]
        initial = {"from_step": _fork_default(run, steps, request.GET.get("from_step"))}
        form = OperationForm(data, operation=chosen, steps=keys, initial=initial)
        if form.is_valid():
            outcome = self.perform(request, chosen, [run], form.cleaned_data)
            self.report(request, chosen, outcome)
            if chosen.forks and outcome.done:
                return HttpResponseRedirect(run_change_url(self.admin_site, outcome.done[0][1]))
            return HttpResponseRedirect(run_change_url(self.admin_site, run.pk))
        preview = _fork_preview(steps, form) if chosen.forks else None
        return self.render_confirmation(request, chosen, [run], form, bulk=False, fork=preview)

    def perform(
        self, request: HttpRequest, operation: Operation, runs: list[WorkflowRun], data: dict
    ) -> Outcome:
        """Call the engine once per eligible run; one run's refusal never stops the others."""
        outcome = Outcome(done=[], skipped=[], failed=[])
        function = operation.engine_rule.function
        options = {"by": request.user, "reason": data.get("reason", "")}
        if operation.forks:
            options["from_step"] = data["from_step"]
        options |= {flag.name: data.get(flag.name, False) for flag in operation.engine_rule.flags}
        for run in runs:
            problem = operation.ineligibility(run.status)
            if problem is not None:
                outcome.skipped.append((run, problem))
                continue
            try:
                result = function(run.pk, **options)
            except pw.WorkflowError as exc:
                # The run changed since it was read, or the engine refuses for its own reason.
                outcome.failed.append((run, exc))
                continue
            outcome.done.append((run, result))
        return outcome

    def report(self, request: HttpRequest, operation: Operation, outcome: Outcome) -> None:
        site = self.admin_site
        if operation.forks:
            for run, new_id in outcome.done:
                links = (run_link(site, run.pk), run_link(site, new_id))
                self.message_user(request, format_html("Forked run {} as run {}.", *links))
        elif outcome.done:
            runs = _named([run for run, _ in outcome.done], site)
            count = _count(len(outcome.done))
            message = format_html("{} {}: {}.", operation.done.capitalize(), count, runs)
            self.message_user(request, message, messages.SUCCESS)
        if outcome.skipped:
            reasons = [
                format_html("{} ({})", run_link(site, run.pk), why) for run, why in outcome.skipped
            ]
            message = format_html(
                "Skipped {} that could not be {}: {}.",
                _count(len(outcome.skipped)),
                operation.done,
                _joined(reasons),
            )
            self.message_user(request, message, messages.WARNING)
        for run, exc in outcome.failed:
            message = format_html(
                "Could not {} run {}: {} [{}]",
                operation.name,
                run_link(site, run.pk),
                exc,
                exc.code,
            )
            self.message_user(request, message, messages.ERROR)

    def render_confirmation(
        self,
        request: HttpRequest,
        operation: Operation,
        runs: list[WorkflowRun],
        form: OperationForm,
        *,
        bulk: bool,
        fork: dict[str, Any] | None = None,
    ) -> TemplateResponse:
        eligible: list[dict[str, Any]] = []
        ineligible: list[dict[str, Any]] = []
        for run in runs:
            problem = operation.ineligibility(run.status)
            row = {
                "run": run,
                "link": run_link(self.admin_site, run.pk),
                "status": status_badge(run.status, run.get_status_display()),
            }
            (eligible if problem is None else ineligible).append({**row, "problem": problem})
        if bulk:
            title = f"{operation.label} {_count(len(runs))}"
        else:
            title = f"{operation.label} run {short_id(runs[0].pk)}"
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.opts,
            "operation": operation,
            "eligible": eligible,
            "ineligible": ineligible,
            "form": form,
            "bulk": bulk,
            "selected": [run.pk for run in runs],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "run_url": None if bulk else run_change_url(self.admin_site, runs[0].pk),
            "run_label": None if bulk else short_id(runs[0].pk),
            "fork": fork,
            "media": self.media + form.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, CONFIRMATION_TEMPLATE, context)


def _fork_default(run: WorkflowRun, steps: list[tuple[str, str]], asked: str | None) -> str | None:
    """The step a fork starts from unless the operator picks another: the one asked for (a
    "Fork from here" link), else the step that failed the run, else its first failed step, else
    its last step: the least that runs again is the safest default."""
    keys = [key for key, _ in steps if not is_engine_key(key)]
    if asked in keys:
        return asked
    failed_key = (run.error or {}).get("step_key")
    if failed_key in keys:
        return failed_key
    failed = [key for key, status in steps if status == StepStatus.FAILED and key in keys]
    if failed:
        return failed[0]
    return keys[-1] if keys else None


def _fork_preview(steps: list[tuple[str, str]], form: OperationForm) -> dict[str, Any]:
    """What executes again for each choice of step (the engine's own split), and the list for
    the one chosen now; the page's script keeps the list in step with the choice."""
    chosen = form["from_step"].value()
    choices = [key for key, _ in steps if not is_engine_key(key)]
    if len(choices) > FORK_PREVIEW_CHOICES:
        choices = [chosen] if chosen in choices else []  # a long run: the server's list only
    again = {key: split_for_fork(steps, key)[1] for key in choices}
    return {"again": again.get(chosen, []), "plans": json.dumps(again)}


def _count(number: int) -> str:
    return f"{number} run" if number == 1 else f"{number} runs"


def _named(runs: list[WorkflowRun], site: admin.AdminSite) -> SafeString:
    return _joined([run_link(site, run.pk) for run in runs])


def _joined(items: list[SafeString]) -> SafeString:
    shown = format_html_join(", ", "{}", [(item,) for item in items[:NAMED_IN_MESSAGE]])
    rest = len(items) - NAMED_IN_MESSAGE
    return format_html("{} and {} more", shown, rest) if rest > 0 else shown
