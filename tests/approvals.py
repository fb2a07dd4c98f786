"""Helpers of the approval and signal tests: people who may decide, a workflow that asks for an
approval with the options a test gives, and moving a deadline into the past on the database
clock (what waiting for it would do, without the wait)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowRun, WorkflowStep
from pikku_workflows.querysets import DatabaseNow
from tests.faults import database_now
from tests.queue import drain_queue

GATE = "approvals.gate"


def person(username: str, *groups: str, decide: bool = True, perms: tuple[str, ...] = ()) -> Any:
    """A user, in `groups`, holding the decide permission (unless `decide=False`) and `perms`
    (codenames of any app)."""
    user = get_user_model().objects.create_user(username, email=f"{username}@example.com")
    codenames = [*(["decide_workflowapproval"] if decide else []), *perms]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    for name in groups:
        group, _ = Group.objects.get_or_create(name=name)
        group.user_set.add(user)
    return get_user_model().objects.get(pk=user.pk)  # no cached permissions


def register_gate(name: str = GATE, **options: Any) -> str:
    """A workflow that asks for one approval with `options` and returns what it got."""

    @pw.workflow(name)
    def gate(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
        outcome = wf.approval("gate", **options)
        wf.set_state("after", "gate")
        return outcome_dict(outcome)

    return name


def outcome_dict(outcome: pw.ApprovalOutcome) -> dict[str, Any]:
    return {
        "status": outcome.status,
        "approved": outcome.approved,
        "decided_by": outcome.decided_by,
        "comment": outcome.comment,
        "data": outcome.data,
        "users": [d["user"] for d in outcome.decisions],
    }


def start(name: str = GATE, *, by: Any = None, **input: Any) -> str:
    """Start `name` inline: its first pass runs here and parks on the approval."""
    return pw.start_workflow(name, input, inline=True, started_by=by)


def approval_of(run_id: Any, step_key: str = "gate", attempt: int = 1) -> WorkflowApproval:
    return WorkflowApproval.objects.get(run_id=run_id, step__step_key=step_key, attempt=attempt)


def finished(run_id: Any) -> WorkflowRun:
    """Run the passes the queue holds (what a worker would), then the run as it stands."""
    drain_queue()
    return WorkflowRun.objects.get(pk=run_id)


def past_deadline(approval: WorkflowApproval, seconds: float = 1) -> None:
    """Move the approval's recorded deadline (and its step's timer) `seconds` into the past of
    the database clock."""
    deadline = database_clock() - timedelta(seconds=seconds)
    WorkflowApproval.objects.filter(pk=approval.pk).update(expires_at=deadline)
    WorkflowStep.objects.filter(pk=approval.step_id).update(wake_at=deadline)


def due_reminder(approval: WorkflowApproval) -> None:
    WorkflowApproval.objects.filter(pk=approval.pk).update(
        remind_at=database_clock() - timedelta(seconds=1)
    )


def database_clock() -> datetime:
    """The database's clock now, on any database (`tests.faults.database_now` is PostgreSQL's)."""
    now = WorkflowRun.objects.annotate(now=DatabaseNow()).values_list("now", flat=True)[:1]
    return next(iter(now)) if now else database_now()


@contextmanager
def received(signal: Any) -> Iterator[list[dict[str, Any]]]:
    """The calls of `signal` while inside, each with whether the announced approval was already
    committed (seen from another connection) when the receiver ran."""
    calls: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        kwargs["committed"] = _visible_elsewhere(kwargs["approval"].pk, kwargs["approval"].status)
        calls.append(kwargs)

    signal.connect(receiver, dispatch_uid="tests.received")
    try:
        yield calls
    finally:
        signal.disconnect(dispatch_uid="tests.received")


def _visible_elsewhere(approval_id: Any, status: str) -> bool:
    import threading

    seen: list[bool] = []

    def look() -> None:
        try:
            row = WorkflowApproval.objects.filter(pk=approval_id).values("status").first()
            seen.append(row is not None and row["status"] == status)
        finally:
            connection.close()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(10)
    return bool(seen and seen[0])
