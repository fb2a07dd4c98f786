"""The approvals inbox (the `WorkflowApproval` changelist: pending first, "assigned to me" by
default, overdue highlighted) and its decide page (the approval's form, a comment, Approve /
Reject). A run's approvals on the run page are in `run_approvals`.

Deciding goes through `pw.decide_approval`, which validates the data with the same form the
page renders and judges who may decide: nothing here writes an approval.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import (
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    Q,
    QuerySet,
    Value,
    When,
)
from django.forms.fields import InvalidJSONInput
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

import pikku_workflows as pw

from ..approvals.forms import load_form
from ..approvals.policy import DECIDE_PERMISSION, ApprovalPolicy, refusal
from ..engine.operations.approval_reads import VIEW_APPROVAL_PERMISSION, decidable_by, visible_to
from ..engine.store.approval_deciders import decider_for
from ..models import WorkflowApproval, WorkflowApprovalDecision
from ..querysets import DatabaseNow
from ..serialization import NestedTooDeeply
from ..status import ApprovalStatus
from ..validation import REASON_MAX_LENGTH
from .display import ADMIN_CSS, EMPTY, format_moment, pretty_json, run_link, status_badge
from .records import ReadOnlyAdminMixin
from .run_approvals import render_decisions, reverse_decide

APPROVALS_CSS = "pikku_workflows/approvals.css"
DECIDE_TEMPLATE = "admin/pikku_workflows/workflowapproval/decide.html"
# The decider's own form is rendered under this prefix, so its fields never meet the page's.
FORM_PREFIX = "data"


class AssignedToMeFilter(admin.SimpleListFilter):
    """On by default: the pending approvals the user may decide now."""

    title = "assigned to me"
    parameter_name = "assigned"
    EVERYONE = "all"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(self.EVERYONE, "Everyone's")]

    def choices(self, changelist: Any) -> Any:
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "Assigned to me",
        }
        yield {
            "selected": self.value() == self.EVERYONE,
            "query_string": changelist.get_query_string({self.parameter_name: self.EVERYONE}),
            "display": "Everyone's",
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        if self.value() == self.EVERYONE:
            return None
        return decidable_by(request.user, queryset)


class _DataField(forms.JSONField):
    """Django's JSON field, with text nested too deeply to parse refused as invalid (Django's
    own lets the parser's RecursionError through, a server error)."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(f"Not storable JSON: {NestedTooDeeply()}.") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)  # shown back as typed, like any invalid JSON


class DecisionForm(forms.Form):
    """The decide page's own fields; the approval's form (if any) is rendered beside it."""

    comment = forms.CharField(
        required=False,
        max_length=REASON_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="Recorded with your decision and in the run's audit trail.",
    )
    json_data = _DataField(
        required=False,
        label="Data (JSON object)",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="Optional; this approval has no form.",
    )

    def __init__(self, *args: Any, with_data: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not with_data:
            del self.fields["json_data"]


@admin.register(WorkflowApproval)
class WorkflowApprovalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("approval_status", "request", "about", "deciders", "deadline", "decide_link")
    list_display_links = None
    list_filter = (AssignedToMeFilter, "status", "policy", "run__workflow")
    list_select_related = ("run", "step", "decided_by")
    search_fields = ("summary", "run__workflow", "step__step_key")
    search_help_text = "Text in the summary, a workflow name or a step key."
    fields = readonly_fields = (
        "approval_status",
        "summary_text",
        "run_link",
        "subject",
        "step_key",
        "who",
        "policy_text",
        "progress",
        "requested",
        "due",
        "on_expire",
        "escalation",
        "reminders_sent",
        "request_json",
        "decided_by",
        "decided_at",
        "comment",
        "data_json",
        "decision_table",
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": (ADMIN_CSS, APPROVALS_CSS)}

    # --- who sees what ---------------------------------------------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return user.has_perm(VIEW_APPROVAL_PERMISSION) or user.has_perm(DECIDE_PERMISSION)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowApproval]:
        approvals = visible_to(request.user, super().get_queryset(request))
        return approvals.prefetch_related("run__subject").annotate(
            overdue=ExpressionWrapper(
                Q(status=ApprovalStatus.PENDING, expires_at__lte=DatabaseNow()),
                output_field=BooleanField(),
            ),
            approvals_count=Count("decisions", filter=Q(decisions__approve=True)),
            decisions_count=Count("decisions"),
        )

    def get_ordering(self, request: HttpRequest) -> Any:
        pending_first = Case(
            When(status=ApprovalStatus.PENDING, then=Value(0)),
            default=Value(1),
            output_field=IntegerField(),
        )
        return (pending_first.asc(), F("expires_at").asc(nulls_last=True), "-created_at")

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_decide"
        view = self.admin_site.admin_view(self.decide_view)
        return [path("<uuid:approval_id>/decide/", view, name=name), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {
            "title": "Approvals inbox",
            "pending_for_me": decidable_by(request.user).count(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    # --- columns ---------------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def approval_status(self, approval: WorkflowApproval) -> SafeString:
        badge = status_badge(approval.status, approval.get_status_display())
        if getattr(approval, "overdue", False):
            return format_html('{} <span class="pikku-overdue">overdue</span>', badge)
        return badge

    @admin.display(description="request")
    def request(self, approval: WorkflowApproval) -> SafeString:
        """The inbox's first column: what is asked, and at which step."""
        return format_html(
            '<div class="pikku-summary">{}</div><div class="pikku-quiet">step {}</div>',
            approval.summary or approval.step.step_key,
            self.step_key(approval),
        )

    @admin.display(description="run", ordering="run__workflow")
    def about(self, approval: WorkflowApproval) -> SafeString:
        """The workflow and its run, and what the run is about (its subject)."""
        subject = approval.run.subject
        return format_html(
            "{}{}",
            self.workflow(approval),
            format_html('<div class="pikku-quiet">{}</div>', subject) if subject else "",
        )

    @admin.display(description="approvers")
    def deciders(self, approval: WorkflowApproval) -> SafeString:
        return format_html(
            '{}<div class="pikku-quiet">{} · {}</div>',
            self.who(approval),
            self.policy_text(approval),
            self.progress(approval),
        )

    @admin.display(description="due", ordering="expires_at")
    def deadline(self, approval: WorkflowApproval) -> SafeString:
        return format_html(
            '{}<div class="pikku-quiet">asked {}</div>',
            self.due(approval),
            self.requested(approval),
        )

    @admin.display(description="summary")
    def summary_text(self, approval: WorkflowApproval) -> str:
        return approval.summary or EMPTY

    @admin.display(description="workflow", ordering="run__workflow")
    def workflow(self, approval: WorkflowApproval) -> SafeString:
        return format_html(
            "{} {}", approval.run.workflow, run_link(self.admin_site, approval.run_id)
        )

    @admin.display(description="run")
    def run_link(self, approval: WorkflowApproval) -> SafeString:
        run = approval.run
        return format_html(
            "{} {} {}",
            run_link(self.admin_site, run.pk),
            run.workflow,
            status_badge(run.status, run.get_status_display()),
        )

    @admin.display(description="subject")
    def subject(self, approval: WorkflowApproval) -> str:
        subject = approval.run.subject
        return str(subject) if subject is not None else EMPTY

    @admin.display(description="step", ordering="step__step_key")
    def step_key(self, approval: WorkflowApproval) -> SafeString:
        return format_html('<code class="pikku-step-key">{}</code>', approval.step.step_key)

    @admin.display(description="approvers")
    def who(self, approval: WorkflowApproval) -> str:
        named = ", ".join(approval.approvers) or "anyone who may decide approvals"
        return f"{named} (four eyes)" if approval.exclude_requester else named

    @admin.display(description="policy")
    def policy_text(self, approval: WorkflowApproval) -> str:
        if approval.policy == ApprovalPolicy.QUORUM:
            return f"quorum of {approval.quorum}"
        return str(ApprovalPolicy(approval.policy).label)

    @admin.display(description="decisions")
    def progress(self, approval: WorkflowApproval) -> str:
        approvals = getattr(approval, "approvals_count", None)
        total = getattr(approval, "decisions_count", None)
        if approvals is None or total is None:
            return EMPTY
        if approval.policy == ApprovalPolicy.QUORUM:
            return f"{approvals} of {approval.quorum} approvals"
        if approval.policy == ApprovalPolicy.ALL:
            return f"{approvals} of {len(approval.approvers)} approvals"
        return f"{total} decision{'s' if total != 1 else ''}"

    @admin.display(description="requested", ordering="created_at")
    def requested(self, approval: WorkflowApproval) -> SafeString:
        return format_moment(approval.created_at)

    @admin.display(description="due", ordering="expires_at")
    def due(self, approval: WorkflowApproval) -> SafeString | str:
        if approval.expires_at is None:
            return EMPTY
        if getattr(approval, "overdue", False):
            return format_html(
                '<span class="pikku-overdue">{}</span>', format_moment(approval.expires_at)
            )
        return format_moment(approval.expires_at)

    @admin.display(description="")
    def decide_link(self, approval: WorkflowApproval) -> SafeString | str:
        if not approval.is_pending:
            return format_html('<a href="{}">Details</a>', self.change_url(approval))
        return format_html(
            '<a class="button pikku-decide" href="{}">Decide…</a>', self.decide_url(approval)
        )

    @admin.display(description="on expiry")
    def on_expire(self, approval: WorkflowApproval) -> str:
        return approval.get_on_expire_display() if approval.expires_at else EMPTY

    @admin.display(description="escalation")
    def escalation(self, approval: WorkflowApproval) -> SafeString | str:
        if not approval.escalate_to:
            return EMPTY
        if approval.escalated_at:
            return format_html("escalated {}", format_moment(approval.escalated_at))
        return f"to {', '.join(approval.escalate_to)} at the deadline"

    @admin.display(description="request")
    def request_json(self, approval: WorkflowApproval) -> SafeString | str:
        return pretty_json(approval.request_data)

    @admin.display(description="data")
    def data_json(self, approval: WorkflowApproval) -> SafeString | str:
        return pretty_json(approval.data)

    @admin.display(description="every decision")
    def decision_table(self, approval: WorkflowApproval) -> SafeString | str:
        return render_decisions(list(approval.decisions.order_by("created_at", "id")))

    # --- URLs ------------------------------------------------------------------------------

    def decide_url(self, approval: WorkflowApproval) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_decide"
        return reverse(name, args=[approval.pk])

    def change_url(self, approval: WorkflowApproval) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change"
        return reverse(name, args=[approval.pk])

    def changelist_url(self) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist"
        return reverse(name)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        context = {
            "decide_url": reverse_decide(self.admin_site, object_id),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    # --- the decide page -------------------------------------------------------------------

    def decide_view(self, request: HttpRequest, approval_id: Any) -> HttpResponse:
        approval = self.get_queryset(request).filter(pk=approval_id).first()
        if approval is None:
            if not self.has_view_permission(request):
                raise PermissionDenied
            raise Http404("No such approval, or not one you may see.")
        form_class = load_form(approval.form) if approval.form else None
        posted = request.method == "POST"
        decision_form = DecisionForm(request.POST if posted else None, with_data=form_class is None)
        data_form = (
            form_class(request.POST if posted else None, prefix=FORM_PREFIX) if form_class else None
        )
        if posted and decision_form.is_valid():
            outcome = self._decide(request, approval, decision_form, data_form)
            if outcome is not None:
                return outcome
        return self.render_decide_page(request, approval, decision_form, data_form)

    def _decide(
        self,
        request: HttpRequest,
        approval: WorkflowApproval,
        decision_form: DecisionForm,
        data_form: forms.BaseForm | None,
    ) -> HttpResponse | None:
        """Call the engine; None to render the page again (with the form's errors)."""
        approve = request.POST.get("decision") == "approve"
        if request.POST.get("decision") not in ("approve", "reject"):
            self.message_user(request, "Choose Approve or Reject.", messages.ERROR)
            return None
        data = (
            _unprefixed(request.POST, FORM_PREFIX)
            if data_form is not None
            else decision_form.cleaned_data.get("json_data")
        )
        try:
            pw.decide_approval(
                approval.pk,
                approve=approve,
                by=request.user,
                comment=decision_form.cleaned_data["comment"],
                data=data,
            )
        except pw.InvalidInput as exc:
            if data_form is not None:
                data_form.is_valid()  # the same form, the same data: its errors show inline
            self.message_user(request, f"Not recorded: {exc}", messages.ERROR)
            return None
        except (pw.ApprovalResolved, pw.ApprovalForbidden) as exc:
            self.message_user(request, f"Not recorded: {exc} [{exc.code}]", messages.ERROR)
            return HttpResponseRedirect(self.change_url(approval))
        verb = "Approved" if approve else "Rejected"
        self.message_user(
            request,
            format_html(
                "{} {} of run {}.",
                verb,
                approval.step.step_key,
                run_link(self.admin_site, approval.run_id),
            ),
            messages.SUCCESS,
        )
        return HttpResponseRedirect(self.changelist_url())

    def render_decide_page(
        self,
        request: HttpRequest,
        approval: WorkflowApproval,
        decision_form: DecisionForm,
        data_form: forms.BaseForm | None,
    ) -> TemplateResponse:
        refusal = None
        if approval.is_pending:
            refusal = _refusal_for(request.user, approval)
        media = self.media + decision_form.media + (data_form.media if data_form else forms.Media())
        context = {
            **self.admin_site.each_context(request),
            "title": f"Decide: {approval.summary or approval.step.step_key}",
            "subtitle": None,
            "opts": self.opts,
            "approval": approval,
            "details": self._details(approval),
            "decisions": render_decisions(list(approval.decisions.order_by("created_at", "id"))),
            "decision_form": decision_form,
            "data_form": data_form,
            "refusal": refusal,
            "change_url": self.change_url(approval),
            "run_url": reverse(
                f"{self.admin_site.name}:pikku_workflows_workflowrun_change", args=[approval.run_id]
            ),
            "media": media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, DECIDE_TEMPLATE, context)

    def _details(self, approval: WorkflowApproval) -> list[tuple[str, Any]]:
        return [
            ("Status", self.approval_status(approval)),
            ("Run", self.run_link(approval)),
            ("Subject", self.subject(approval)),
            ("Step", self.step_key(approval)),
            ("Approvers", self.who(approval)),
            ("Policy", self.policy_text(approval)),
            ("Requested", self.requested(approval)),
            ("Due", self.due(approval)),
            ("Request", self.request_json(approval)),
        ]


def _unprefixed(posted: QueryDict, prefix: str) -> QueryDict:
    """The posted fields of the decider's form, without the page's prefix (as the API posts them)."""
    data = QueryDict(mutable=True)
    start = f"{prefix}-"
    for key in posted:
        if key.startswith(start):
            data.setlist(key[len(start) :], posted.getlist(key))
    return data


def _refusal_for(user: Any, approval: WorkflowApproval) -> str | None:
    """Why `user` may not decide (as the engine will say), or None."""
    if WorkflowApprovalDecision.objects.filter(approval=approval, user=user).exists():
        return "You have already decided this approval."
    return refusal(
        decider_for(user),
        approval.approvers,
        exclude_requester=approval.exclude_requester,
        requesters=approval.requesters,
    )
