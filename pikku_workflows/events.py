"""What the engine tells the world: Django signals (sent after the commit that recorded what they
announce) and the log lines an operator reads, each carrying `run_id` and `step_key` as `extra`
for structured handlers.

Signals (`sender` is `WorkflowRun`; connect receivers in your `AppConfig.ready()`):

- `run_started(run_id, workflow, parent_run_id)`: a run was created (a start, a child, a fork).
- `run_finished(run_id, workflow, status, error)`: it completed, failed or was cancelled.
- `step_retrying(run_id, step_key, attempt, attempt_limit, error, retry_at)`: an attempt failed
  and the step will be tried again at `retry_at`.
- `step_failed(run_id, step_key, attempt, attempt_limit, error)`: its last attempt failed.

Receivers run after the commit, in the process that wrote it; one that raises is logged and
changes nothing (`send_robust`). Importing this module imports no models.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urljoin

from django.apps import apps
from django.db import transaction
from django.dispatch import Signal

from .conf import pikku_settings

logger = logging.getLogger(__name__)

run_started = Signal()
run_finished = Signal()
step_retrying = Signal()
step_failed = Signal()


def announce_run_started(run: Any) -> None:
    """A run row was inserted (inside the transaction that wrote it, if any)."""
    run_id, workflow, parent = str(run.pk), run.workflow, run.parent_run_id

    def after_commit() -> None:
        logger.info(
            "pikku_workflows: run %s of %s started",
            run_id,
            workflow,
            extra={"run_id": run_id, "step_key": None, "workflow": workflow},
        )
        _send(run_started, run_id=run_id, workflow=workflow, parent_run_id=_text(parent))

    transaction.on_commit(after_commit)


def announce_run_finished(
    run_id: Any, status: str, error: dict[str, Any] | None, workflow: str | None = None
) -> None:
    """A run reached a terminal status: INFO when completed or cancelled, ERROR when failed."""
    run_id = str(run_id)

    def after_commit() -> None:
        name = workflow or _workflow_of(run_id)
        extra = {"run_id": run_id, "step_key": (error or {}).get("step_key"), "workflow": name}
        if status == "failed":
            logger.error(
                "pikku_workflows: run %s of %s failed: %s%s",
                run_id,
                name,
                _describe(error),
                _admin_link(run_id),
                extra=extra,
            )
        else:
            logger.info("pikku_workflows: run %s of %s %s", run_id, name, status, extra=extra)
        _send(run_finished, run_id=run_id, workflow=name, status=status, error=error)

    transaction.on_commit(after_commit)


def announce_attempt_failed(step: Any) -> None:
    """A step's attempt was recorded failed (`step` as written: attempt, limit, error, wake_at).
    WARNING with what happens next; `step_retrying` or `step_failed` after the commit."""
    run_id, step_key, error = str(step.run_id), step.step_key, step.error or {}
    attempt, limit, retry_at = step.attempt, step.attempt_limit, step.wake_at
    retrying = attempt < limit

    def after_commit() -> None:
        then = f"next attempt at {retry_at.isoformat()}" if retry_at else "will be retried"
        logger.warning(
            "pikku_workflows: run %s step %s attempt %s/%s failed: %s; %s%s",
            run_id,
            step_key,
            attempt,
            limit,
            _describe(error),
            then if retrying else "no attempts left",
            _admin_link(run_id),
            extra={"run_id": run_id, "step_key": step_key, "error_code": error.get("code")},
        )
        details = {"attempt": attempt, "attempt_limit": limit, "error": error}
        if retrying:
            _send(step_retrying, run_id=run_id, step_key=step_key, retry_at=retry_at, **details)
        else:
            _send(step_failed, run_id=run_id, step_key=step_key, **details)

    transaction.on_commit(after_commit)


def announce_missing_function(run_id: Any, step_key: str, function: str | None, why: str) -> None:
    """A step asked for a step function this process lacks, and its run is being suspended
    (RPC_NOT_FOUND): a WARNING naming the run, the step and the function (`why` says what to
    do, with the close names a typo suggests)."""
    run_id = str(run_id)
    logger.warning(
        "pikku_workflows: run %s step %s asks for step function %r: %s%s",
        run_id,
        step_key,
        function,
        why,
        _admin_link(run_id),
        extra={"run_id": run_id, "step_key": step_key, "function": function},
    )


def announce_step_retargeted(
    run_id: Any, step_key: str, recorded: str | None, now: str | None
) -> None:
    """A step no attempt ran took the function the code asks for now (a typo fixed)."""
    run_id = str(run_id)
    logger.info(
        "pikku_workflows: run %s step %s now calls %r instead of %r, which never ran",
        run_id,
        step_key,
        now,
        recorded,
        extra={"run_id": run_id, "step_key": step_key, "function": now},
    )


def announce_takeover(run_id: Any, step_key: str, attempt: int, lapsed_on: str | None) -> None:
    """A step's attempt was taken over after its lease lapsed (its worker went silent): one
    WARNING after the commit, naming the run, the step, the silent worker and the new attempt."""
    run_id = str(run_id)
    worker = f"worker {lapsed_on}" if lapsed_on else "its worker"

    def after_commit() -> None:
        logger.warning(
            "pikku_workflows: run %s step %s: attempt %s's lease lapsed (%s went silent); "
            "attempt %s takes over%s",
            run_id,
            step_key,
            attempt - 1,
            worker,
            attempt,
            _admin_link(run_id),
            extra={"run_id": run_id, "step_key": step_key, "worker": lapsed_on},
        )

    transaction.on_commit(after_commit)


def announce_operator_action(
    run_id: Any, action: str, by: Any, reason: str, before: str, after: str | None
) -> None:
    """An audited operator action, inside its transaction: a `LogEntry` for the admin's History
    (when the admin is installed and a user acted), and an INFO line after the commit."""
    run_id = str(run_id)
    who = by.get_username() if by is not None else "system"
    change = f"({before} → {after})" if before and after and after != before else ""
    change = change or f"({before or after})"
    why = f": {reason}" if reason else ""
    if by is not None and apps.is_installed("django.contrib.admin"):
        _write_log_entry(run_id, by, f"{action} {change}{why}")
    extra = {"run_id": run_id, "step_key": None, "action": action, "user": who}
    transaction.on_commit(
        lambda: logger.info(
            "pikku_workflows: run %s: %s by %s %s%s", run_id, action, who, change, why, extra=extra
        )
    )


def admin_url(run_id: Any) -> str | None:
    """The run's admin page under `ADMIN_BASE_URL` (the site's address; the path comes from the
    URLconf), or None when that setting is unset."""
    base = pikku_settings.ADMIN_BASE_URL
    if not base:
        return None
    from django.urls import NoReverseMatch, reverse

    try:
        path = reverse("admin:pikku_workflows_workflowrun_change", args=[run_id])
    except NoReverseMatch:
        path = f"admin/pikku_workflows/workflowrun/{run_id}/change/"
    return urljoin(base if base.endswith("/") else f"{base}/", path)


def _admin_link(run_id: str) -> str:
    url = admin_url(run_id)
    return f" ({url})" if url else ""


def _describe(error: dict[str, Any] | None) -> str:
    error = error or {}
    return f"{error.get('code') or 'ERROR'}: {error.get('message', '')}"


def _write_log_entry(run_id: str, by: Any, message: str) -> None:
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    from .models import WorkflowRun

    LogEntry.objects.create(
        user_id=by.pk,
        content_type_id=ContentType.objects.get_for_model(WorkflowRun).pk,
        object_id=run_id,
        object_repr=f"{_workflow_of(run_id)} {run_id}"[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def _workflow_of(run_id: str) -> str | None:
    from .models import WorkflowRun

    return WorkflowRun.objects.filter(pk=run_id).values_list("workflow", flat=True).first()


def _send(signal: Signal, **details: Any) -> None:
    from .models import WorkflowRun

    for receiver, outcome in signal.send_robust(sender=WorkflowRun, **details):
        if isinstance(outcome, Exception):
            logger.error(
                "pikku_workflows: signal receiver %r raised",
                receiver,
                exc_info=outcome,
                extra={"run_id": details.get("run_id"), "step_key": details.get("step_key")},
            )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
