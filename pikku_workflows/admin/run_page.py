"""What the run page shows below its summary: steps (each with its input), the updates sent to
it, the timeline chart, the audit trail (newest first) and every attempt, in a fixed number of
queries whatever the run's size."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from ..engine.operations.control import FORK
from ..engine.operations.reads import shown_step_status
from ..models import (
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
    WorkflowStepHistory,
    WorkflowUpdate,
)
from ..status import RunStatus, StepKind, StepStatus
from ..step_keys import is_engine_key
from .display import (
    EMPTY,
    describe_step_key,
    format_duration,
    pretty_error,
    pretty_json,
    run_link,
    status_badge,
)
from .run_approvals import run_approvals_context
from .silent_workers import silent_attempts
from .timeline import Lane, build_chart, lease_lapsed
from .timeline_rows import chart_rows

if TYPE_CHECKING:
    from .runs import WorkflowRunAdmin

# An action that ended the run is written a moment after the run's `finished_at`.
MARK_SLACK = timedelta(seconds=1)
ATTEMPT_TIMES = ("created", "scheduled", "running", "waiting", "succeeded", "failed")
# Steps that are not tried again, and hold no work to fork from.
UNTRIED_KINDS = frozenset({StepKind.SLEEP, StepKind.SUSPEND, StepKind.PATCH})


def run_page_context(
    model_admin: WorkflowRunAdmin, request: HttpRequest, run: WorkflowRun
) -> dict[str, Any]:
    """Four queries: the steps, their attempts, the audit trail (with its users), the updates
    (with their senders and signals); and the run's approvals with their decisions."""
    steps = list(
        WorkflowStep.objects.filter(run=run)
        .with_clock()
        .order_by("created_at", "step_key")
        .prefetch_related(
            Prefetch("history", queryset=WorkflowStepHistory.objects.order_by("attempt"))
        )
    )
    audit = list(
        WorkflowAuditEntry.objects.filter(run=run)
        .select_related("user")
        .order_by("-created_at", "-id")
    )
    updates = WorkflowUpdate.objects.filter(run=run).select_related("sent_by", "signal")
    site = model_admin.admin_site
    operations = model_admin.run_operations(request, run)
    fork_url = next((op["url"] for op in operations if op["name"] == FORK.action), None)
    rows = [_step_row(site, run, step, fork_url) for step in steps]
    timeline = _timeline(run, steps, audit)
    timeline_rows = chart_rows(
        timeline.lanes, {step.step_key: (step.gather_key, step.status) for step in steps}
    )
    return {
        "run_operations": operations,
        "steps": rows,
        "attempt_history": [
            _attempt_row(step, attempt) for step in steps for attempt in step.history.all()
        ],
        "timeline": timeline,
        "timeline_rows": timeline_rows,
        "timeline_gathers": any(not isinstance(row, Lane) for row in timeline_rows),
        "audit_trail": [_audit_row(site, entry) for entry in audit],
        "updates": [_update_row(update) for update in updates.order_by("created_at", "id")],
        "silent_attempts": silent_attempts(steps),
        **run_approvals_context(site, request, run),
    }


def _timeline(run: WorkflowRun, steps: list[WorkflowStep], audit: list[WorkflowAuditEntry]) -> Any:
    end = run.finished_at or timezone.now()
    # Operator actions after the run ended (a fork of it days later) would squash the chart.
    marks = [_audit_mark(entry) for entry in audit if entry.created_at <= end + MARK_SLACK]
    chart = build_chart(
        run.created_at,
        end,
        [(step.step_key, list(step.history.all())) for step in steps],
        marks,
        live=not run.is_settled,
        timers={step.step_key for step in steps if step.kind == StepKind.SLEEP},
    )
    for lane in chart.lanes:
        lane.label = describe_step_key(lane.step_key)
    return chart


def _step_row(
    site: Any, run: WorkflowRun, step: WorkflowStep, fork_url: str | None
) -> dict[str, Any]:
    attempts = list(step.history.all())
    latest = next((h for h in reversed(attempts) if h.attempt == step.attempt), None)
    engine = is_engine_key(step.step_key)
    return {
        "key": step.step_key,
        "key_display": describe_step_key(step.step_key),
        "engine": engine,
        "function": step.function_name or step.get_kind_display(),
        "status": _step_status(run, step),
        # A sleep, a suspend or a patch marker is not tried again: attempts say nothing there.
        "attempt": EMPTY
        if step.kind in UNTRIED_KINDS
        else f"{step.attempt} / {step.attempt_limit}",
        "duration": _duration(latest, live=not run.is_settled),
        "input": pretty_json(step.data) if step.data not in (None, {}) else EMPTY,
        "result": pretty_json(step.result) if step.status == StepStatus.SUCCEEDED else EMPTY,
        "error": pretty_error(step.error, omit=("step_key",)),
        # One column for both: a step has a result or an error, never both.
        "outcome": _outcome(step),
        "child_run_id": step.child_run_id,
        "child": run_link(site, step.child_run_id) if step.child_run_id else EMPTY,
        "copied": step.copied,
        "gather": step.gather_key,
        # A fork starts from a step that does work: the engine's own steps follow theirs, and
        # a fork from a sleep or a marker would only wait or mark again.
        "fork_url": f"{fork_url}?from_step={step.step_key}"
        if fork_url and not engine and step.kind not in UNTRIED_KINDS
        else None,
    }


def _outcome(step: WorkflowStep) -> Any:
    if step.status == StepStatus.SUCCEEDED:
        return pretty_json(step.result)
    return pretty_error(step.error, omit=("step_key",))


def _step_status(run: WorkflowRun, step: WorkflowStep) -> Any:
    """The step's badge, in the summary's words (`shown_step_status`: a timer or queued step
    the cancel disarmed says "cancelled"); a retry the cancel disarmed says so beside "failed"."""
    shown = shown_step_status(run, step)
    disarmed = run.status == RunStatus.CANCELLED and step.wake_at is None
    if disarmed and step.status == StepStatus.FAILED and step.attempt < step.attempt_limit:
        return format_html(
            "{} {}", status_badge(step.status), status_badge("cancelled", "retry cancelled")
        )
    return status_badge(shown, shown.capitalize())


def _duration(attempt: WorkflowStepHistory | None, *, live: bool = False) -> str:
    if attempt is None:
        return EMPTY
    end = attempt.succeeded_at or attempt.failed_at
    if end is None:
        if live and attempt.running_at is not None and attempt.status == StepStatus.RUNNING:
            return f"running for {format_duration(timezone.now() - attempt.running_at)}"
        return EMPTY
    return format_duration(end - (attempt.running_at or attempt.created_at))


def _attempt_row(step: WorkflowStep, attempt: WorkflowStepHistory) -> dict[str, Any]:
    status = status_badge(attempt.status, attempt.get_status_display())
    if lease_lapsed(attempt.error):
        status = status_badge("lapsed", "lease lapsed")
    return {
        "step_key": step.step_key,
        "attempt": attempt.attempt,
        "status": status,
        "dispatch": attempt.get_dispatch_display() if attempt.dispatch else EMPTY,
        "worker": attempt.worker or EMPTY,
        "times": [(name, getattr(attempt, f"{name}_at")) for name in ATTEMPT_TIMES],
        "error": pretty_error(attempt.error, omit=("step_key",)),
    }


def _update_row(update: WorkflowUpdate) -> dict[str, Any]:
    """An update as the run sees it: accepted (no `wf.receive` took it yet), taken (received,
    not answered yet) or answered, with its answer."""
    if update.completed_at is not None:
        status = status_badge("succeeded", "answered")
    elif update.signal is not None and update.signal.consumed_at is not None:
        status = status_badge("waiting", "taken")
    else:
        status = status_badge("pending", "accepted")
    return {
        "name": update.name,
        "update_id": update.update_id,
        "sent_by": update.sent_by.get_username() if update.sent_by else EMPTY,
        "status": status,
        "sent_at": update.created_at,
        "answered_at": update.completed_at,
        "payload": pretty_json(update.payload),
        "result": pretty_json(update.result) if update.completed_at is not None else EMPTY,
    }


def _audit_mark(entry: WorkflowAuditEntry) -> tuple[Any, str, str]:
    who = entry.user.get_username() if entry.user else "system"
    title = f"{entry.action} by {who}" + (f": {entry.reason}" if entry.reason else "")
    return entry.created_at, entry.action, title


def _audit_row(site: Any, entry: WorkflowAuditEntry) -> dict[str, Any]:
    payload = dict(entry.payload or {})
    before, after = payload.pop("status_before", None), payload.pop("status_after", None)
    change = EMPTY
    if before and after:
        change = format_html("{} → {}", status_badge(before), status_badge(after))
    new_run = payload.pop("new_run_id", None)
    source = payload.pop("forked_from", None)
    return {
        "at": entry.created_at,
        "action": entry.action,
        "user": entry.user.get_username() if entry.user else EMPTY,
        "reason": entry.reason or EMPTY,
        "change": change,
        "new_run": run_link(site, new_run) if new_run else None,
        "source_run": run_link(site, source) if source else None,
        "details": pretty_json(payload) if payload else "",
    }
