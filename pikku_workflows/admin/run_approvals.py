"""A run's approvals as the run page lists them (each with every decision and who may still
decide), the run list's "awaiting approval" filter, and how many approvals wait for the current
user (the run page, the admin index's `{% pending_approvals %}`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..approvals.policy import DECIDE_PERMISSION
from ..engine.operations.approval_reads import decidable_by
from ..engine.store.approval_deciders import eligible_deciders
from ..models import WorkflowApproval, WorkflowApprovalDecision, WorkflowRun, WorkflowStep
from ..status import RunStatus
from .display import EMPTY, format_moment, pretty_json, status_badge

# The run page says who may decide its first few pending approvals (a query each).
HINTED_APPROVALS = 5


class AwaitingApprovalFilter(admin.SimpleListFilter):
    """Runs (list filter of the run admin) parked on an approval nobody has settled yet."""

    title = "awaiting approval"
    parameter_name = "awaiting_approval"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        parked = Q(status=RunStatus.RUNNING) & Q(
            Exists(WorkflowStep.objects.awaiting_approval().filter(run_id=OuterRef("pk")))
        )
        if self.value() == "yes":
            return queryset.filter(parked)
        if self.value() == "no":
            return queryset.exclude(parked)
        return None


def reverse_decide(site: admin.AdminSite, approval_id: Any) -> str:
    return reverse(f"{site.name}:pikku_workflows_workflowapproval_decide", args=[approval_id])


def render_decisions(decisions: list[WorkflowApprovalDecision]) -> SafeString | str:
    """Every decision, one under the other: who, which way, when, then their comment and data
    (a list, not a table: a narrow column keeps the data readable)."""
    if not decisions:
        return format_html('<p class="pikku-empty">{}</p>', "No decisions yet.")
    items = format_html_join(
        "",
        '<li class="pikku-decision"><div class="pikku-decision-head">{} {} {}</div>{}{}</li>',
        (
            (
                d.username,
                status_badge(
                    "approved" if d.approve else "rejected", "Approved" if d.approve else "Rejected"
                ),
                format_moment(d.created_at),
                format_html('<div class="pikku-decision-comment">{}</div>', d.comment)
                if d.comment
                else "",
                pretty_json(d.data) if d.data else "",
            )
            for d in decisions
        ),
    )
    return format_html('<ul class="pikku-decisions">{}</ul>', items)


def run_approvals_context(
    site: admin.AdminSite, request: HttpRequest, run: WorkflowRun
) -> dict[str, Any]:
    """The run page's approvals (every attempt's, each with every decision) and how many of them
    wait for the current user."""
    approvals = list(
        WorkflowApproval.objects.filter(run=run)
        .select_related("step", "decided_by")
        .prefetch_related("decisions")
        .order_by("created_at")
    )
    mine = set(decidable_by(request.user).values_list("pk", flat=True))
    # Who may still decide: a query each, so only for the first few pending approvals.
    hinted = [a.pk for a in approvals if a.is_pending][:HINTED_APPROVALS]
    rows = [
        {
            "approval": approval,
            "status": status_badge(approval.status, approval.get_status_display()),
            "step_key": approval.step.step_key,
            "approvers": ", ".join(approval.approvers) or "anyone who may decide approvals",
            "due": format_moment(approval.expires_at) if approval.expires_at else EMPTY,
            "decided": _decided(approval),
            "decisions": render_decisions(
                sorted(approval.decisions.all(), key=lambda d: (d.created_at, d.pk))
            ),
            "decide_url": reverse_decide(site, approval.pk) if approval.pk in mine else None,
            "deciders": _deciders_hint(approval) if approval.pk in hinted else "",
        }
        for approval in approvals
    ]
    return {
        "approvals": rows,
        # This run's approvals I may decide now: none on a settled run (the inbox has the rest).
        "approvals_for_me": sum(1 for approval in approvals if approval.pk in mine),
        "approvals_inbox_url": reverse(f"{site.name}:pikku_workflows_workflowapproval_changelist"),
    }


def _decided(approval: WorkflowApproval) -> SafeString | str:
    if approval.decided_at is None:
        return EMPTY
    who = approval.decided_by.get_username() if approval.decided_by else "the deadline"
    return format_html("by {} {}", who, format_moment(approval.decided_at))


def _deciders_hint(approval: WorkflowApproval) -> str:
    """Who can still decide a pending approval (a warning when nobody can)."""
    if not approval.is_pending:
        return ""
    names = [user.get_username() for user in eligible_deciders(approval)[:6]]
    if not names:
        return "Nobody can decide this approval now: reassign it."
    more = "…" if len(names) > 5 else ""
    return "May decide: " + ", ".join(names[:5]) + more


def pending_approvals_for(request: HttpRequest) -> dict[str, Any]:
    """The admin index's notice: how many approvals wait for the current user, and the inbox."""
    user = request.user
    count = decidable_by(user).count() if user.has_perm(DECIDE_PERMISSION) else 0
    return {
        "count": count,
        "inbox_url": reverse("admin:pikku_workflows_workflowapproval_changelist"),
    }
