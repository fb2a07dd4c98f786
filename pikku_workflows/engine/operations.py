"""The public operations on runs: start, run to completion; the operator actions (cancel,
suspend, resume, retry, fork) live in `operator` and are re-exported here.

Each validates its input and the run's state and raises a `WorkflowError` with a stable code.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, transaction

from ..exceptions import (
    IdempotencyConflict,
    InvalidInput,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunSuspended,
    RunTimeout,
    WorkflowDispatchException,
    _RunEnded,
)
from ..models import WorkflowRun
from ..registry import registry
from ..serialization import NotStorableJson, round_trip
from ..status import RunStatus
from .leases import new_lease_holder
from .operator import cancel_run, fork_run, resume_run, retry_run, suspend_run
from .orchestrator import orchestrate
from .replay import LeasedRun
from .runs import create_run_row
from .summary import get_run_status, run_pk

__all__ = [
    "cancel_run",
    "fork_run",
    "get_run_status",
    "resume_run",
    "retry_run",
    "run_to_completion",
    "start_workflow",
    "suspend_run",
    "wait_for_run",
]

logger = logging.getLogger(__name__)

POLL_FIRST_SECONDS = 0.01
POLL_GROWTH = 1.6
POLL_MAX_SECONDS = 1.0


def start_workflow(
    name: str,
    input: Any = None,
    *,
    inline: bool = False,
    idempotency_key: str | None = None,
    started_by: Any = None,
    subject: Any = None,
) -> str:
    """Create a run and return its id; never raises for a failing body (the run records it).

    `inline=True` drives the run in this process until it completes, fails or parks. Inside an
    open `transaction.atomic()` the run (and an inline pass) live in that transaction: they
    vanish with a rollback, and queued work is enqueued only after the commit.
    """
    registry.get_workflow(name)
    try:
        input = round_trip(input)
    except NotStorableJson as exc:
        raise InvalidInput(f"The input of {name!r} is not storable JSON: {exc}") from exc
    holder = new_lease_holder() if inline else None
    run, created = _create_or_reuse(name, input, holder, idempotency_key, started_by, subject)
    if created:
        _begin(run, holder)
    return str(run.pk)


def _create_or_reuse(
    name: str, input: Any, holder: str | None, key: str | None, started_by: Any, subject: Any
) -> tuple[WorkflowRun, bool]:
    """The new run (an inline one born leased to `holder`), or the one `key` already names."""
    if key is not None:
        existing = WorkflowRun.objects.filter(workflow=name, idempotency_key=key).first()
        if existing is not None:
            return _same_input(existing, input, key), False
    subject_fields: dict[str, Any] = {}
    if subject is not None:
        subject_fields = {
            "subject_type": ContentType.objects.get_for_model(subject),
            "subject_id": str(subject.pk),
        }
    # Only a savepoint lets an enclosing transaction survive a duplicate key (IntegrityError).
    guarded = transaction.atomic if transaction.get_connection().in_atomic_block else nullcontext
    try:
        with guarded():
            run = create_run_row(
                name,
                input,
                inline=holder is not None,
                lease_holder=holder,
                idempotency_key=key,
                started_by=started_by,
                **subject_fields,
            )
    except IntegrityError:
        # Another caller created the run with this key between our read and insert.
        existing = WorkflowRun.objects.filter(workflow=name, idempotency_key=key).first()
        if key is None or existing is None:
            raise
        return _same_input(existing, input, key), False
    return run, True


def _same_input(run: WorkflowRun, input: Any, key: str) -> WorkflowRun:
    if run.input != input:
        raise IdempotencyConflict(run.workflow, key)
    return run


def _begin(run: WorkflowRun, holder: str | None) -> None:
    from ..dispatch import enqueue_orchestration

    try:
        if holder is not None:
            # Born leased, and new: the first pass has no steps to read.
            orchestrate(run.pk, inline_caller=True, leased=LeasedRun(run, holder, steps={}))
        else:
            enqueue_orchestration(run.pk)
    except WorkflowDispatchException:
        # The run is recorded; the recovery sweep relays it once the queue is back.
        logger.warning("pikku_workflows: run %s not dispatched; recovery will relay it", run.pk)


def run_to_completion(name: str, input: Any = None, *, timeout: float | None = None) -> Any:
    """Start the run inline and wait until it ends: its output, or RunFailed/RunCancelled/
    RunSuspended; RunTimeout when `timeout` seconds pass first."""
    run_id = start_workflow(name, input, inline=True)
    return wait_for_run(run_id, timeout=timeout)


def wait_for_run(run_id: Any, *, timeout: float | None = None) -> Any:
    pk = run_pk(run_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = POLL_FIRST_SECONDS
    while True:
        run = WorkflowRun.objects.filter(pk=pk).values("status", "output", "error").first()
        if run is None:
            raise RunNotFound(run_id)
        if run["status"] == RunStatus.COMPLETED:
            return run["output"]
        ended: type[_RunEnded] | None = {
            RunStatus.FAILED.value: RunFailed,
            RunStatus.CANCELLED.value: RunCancelled,
            RunStatus.SUSPENDED.value: RunSuspended,
        }.get(run["status"])
        if ended is not None:
            raise ended(run_id, run["error"])
        if deadline is not None and time.monotonic() >= deadline:
            raise RunTimeout(run_id, timeout or 0)
        pause = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
        time.sleep(pause)
        delay = min(delay * POLL_GROWTH, POLL_MAX_SECONDS)
