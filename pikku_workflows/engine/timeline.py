"""A run's timeline (every attempt of every step as ordered events, plus operator actions) and
the run's state at any point of it; the pure work is in `pikku_workflows.time_travel`."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import F

from ..exceptions import RunNotFound
from ..models import WorkflowAuditEntry, WorkflowRun, WorkflowStepHistory
from ..time_travel import build_timeline, state_at
from .summary import run_pk

HISTORY_COLUMNS = (
    "attempt",
    "status",
    "result",
    "error",
    "created_at",
    "scheduled_at",
    "running_at",
    "waiting_at",
    "succeeded_at",
    "failed_at",
)


def get_run_timeline(run_id: Any) -> list[dict[str, Any]]:
    """`[{seq, at, step_key, attempt, event, ...}]`, ordered; see `time_travel` for the keys."""
    pk = run_pk(run_id)
    if not WorkflowRun.objects.filter(pk=pk).exists():
        raise RunNotFound(run_id)
    return _timeline(pk)


def reconstruct_run_state(run_id: Any, at: Any = None) -> dict[str, Any]:
    """The run as it stood at `at` (a seq or a datetime, inclusive; default: the last event):
    `{seq, at, phase, steps: {key: {status, attempt, result, error}}, path, results}`."""
    pk = run_pk(run_id)
    status = WorkflowRun.objects.filter(pk=pk).values_list("status", flat=True).first()
    if status is None:
        raise RunNotFound(run_id)
    return state_at(_timeline(pk), at, run_status=status)


def _timeline(pk: uuid.UUID) -> list[dict[str, Any]]:
    # Rows in step creation order, so events tied on time, lifecycle and attempt keep it.
    history = (
        WorkflowStepHistory.objects.filter(step__run_id=pk)
        .order_by("step__created_at", "step__step_key", "attempt")
        .values(
            *HISTORY_COLUMNS,
            step_key=F("step__step_key"),
            from_step_key=F("step__from_step_key"),
        )
    )
    entries = (
        WorkflowAuditEntry.objects.filter(run_id=pk)
        .select_related("user")
        .order_by("created_at", "id")
    )
    audit = [
        {
            "action": entry.action,
            "user": entry.user.get_username() if entry.user else None,
            "created_at": entry.created_at,
        }
        for entry in entries
    ]
    return build_timeline(history, audit)
