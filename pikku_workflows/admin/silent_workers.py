"""The run page's word on a step whose worker went silent (killed, hung, cut off from the
database): which worker, since when, and when its lease lapses and the step runs again."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import WorkflowStep, WorkflowStepHistory
from ..status import StepStatus
from ..worker_registration import workers_named
from .display import format_duration, format_moment


def silent_attempts(steps: list[WorkflowStep]) -> list[SafeString]:
    """One line per running attempt whose worker is not seen (missed its heartbeats), or whose
    lease lapsed; `steps` with their history prefetched and `with_clock()`. One query."""
    running = [(step, _current(step)) for step in steps if step.status == StepStatus.RUNNING]
    names = {attempt.worker for _, attempt in running if attempt and attempt.worker}
    workers = workers_named(names)
    lines = []
    for step, attempt in running:
        worker = workers.get(attempt.worker or "") if attempt else None
        lapsed = bool(getattr(step, "lease_lapsed", False))
        if lapsed or (worker is not None and getattr(worker, "silent", False)):
            lines.append(_line(step, attempt, worker, lapsed))
    return lines


def _current(step: WorkflowStep) -> WorkflowStepHistory | None:
    return next((h for h in step.history.all() if h.attempt == step.attempt), None)


def _line(
    step: WorkflowStep, attempt: WorkflowStepHistory | None, worker: Any, lapsed: bool
) -> SafeString:
    then = (
        "it was the step's last attempt: the step fails"
        if step.attempt >= step.attempt_limit
        else f"then another worker runs the step again as attempt {step.attempt + 1}"
    )
    lease = step.lease_expires_at
    if lapsed:
        return format_html(
            "Step <code>{}</code> attempt {}: its lease lapsed {} ({} went silent); {}.",
            step.step_key,
            step.attempt,
            format_moment(lease) if lease else "",
            _name(attempt, worker),
            then.replace("then another", "another"),
        )
    return format_html(
        "Step <code>{}</code> attempt {} runs on {}: its lease lapses {}, {}.",
        step.step_key,
        step.attempt,
        _who(attempt, worker),
        format_moment(lease) if lease else "when recovery finds it",
        then,
    )


def _name(attempt: WorkflowStepHistory | None, worker: Any) -> SafeString | str:
    """The process that ran the attempt: a registered pikku_worker, or as the history names it."""
    if worker is not None:
        return format_html("pikku_worker <code>{}:{}</code>", worker.host, worker.pid)
    if attempt is not None and attempt.worker:
        return format_html("<code>{}</code>", attempt.worker)
    return "its worker"


def _who(attempt: WorkflowStepHistory | None, worker: Any) -> SafeString | str:
    """The attempt's worker and how long it has been silent."""
    if worker is None:
        return _name(attempt, worker)
    return format_html(
        "{}, not seen for {} (killed, hung or cut off from the database)",
        _name(attempt, worker),
        format_duration(timezone.now() - worker.last_seen_at),
    )
