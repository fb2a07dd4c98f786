"""Queued steps from the pass's side: hand a step to a worker of its cluster, then park the run.

A queue that refuses the message is transient: the step stays pending, the run running, and the
pass is abandoned for recovery to relay (docs/architecture.md §3, §4); nothing is failed.
"""

from __future__ import annotations

import contextlib
from typing import Any, NoReturn

from django.db import DatabaseError

from ..dispatch import enqueue_step, queue_in_engine_database, step_message
from ..exceptions import (
    InvalidTransition,
    PassAbandoned,
    RunParked,
    StepSuperseded,
    WorkflowDispatchException,
)
from ..models import WorkflowStep
from ..registry import registry
from ..status import StepStatus
from .replay import ReplayPass
from .transitions import create_dispatched_step, create_step_in_run, move_step, on_postgresql


def dispatch_new_step(rp: ReplayPass, step_key: str, fields: dict[str, Any]) -> NoReturn:
    """Create a queued step and dispatch it, then park the run.

    When django-q2's queue is a table of this PostgreSQL database, the step, its message and the
    run lease's release are one statement (one commit instead of four); otherwise the step is
    created pending and `dispatch_step` enqueues it, then marks it scheduled.
    """
    if not (on_postgresql() and queue_in_engine_database()):
        dispatch_step(rp, _create_pending(rp, step_key, fields))
    definition = registry.get_step_function(fields["function_name"])
    try:
        message = step_message(rp.run.pk, step_key, definition.queue)
        step, rp.lease_released = create_dispatched_step(
            rp.run.pk, rp.holder, step_key, message, **fields
        )
    except (WorkflowDispatchException, DatabaseError) as exc:
        # The queue table refused the message (or the statement failed with it): record the
        # step without one; recovery relays it once the queue takes messages again.
        _create_pending(rp, step_key, fields)
        refused = WorkflowDispatchException(f"Step {step_key!r} was not dispatched: {exc}")
        raise PassAbandoned(refused) from exc
    rp.steps[step_key] = step
    raise RunParked(step_key)


def dispatch_step(rp: ReplayPass, step: WorkflowStep) -> NoReturn:
    """Enqueue the step for a worker, then mark it scheduled; the run waits for it."""
    definition = registry.get_step_function(step.function_name or "")
    try:
        enqueue_step(rp.run.pk, step.step_key, definition.queue)
    except WorkflowDispatchException as exc:
        raise PassAbandoned(exc) from exc
    if step.status == StepStatus.PENDING:
        # A worker may have claimed it already: then the guard refuses and that is fine.
        with contextlib.suppress(InvalidTransition, StepSuperseded):
            move_step(step, StepStatus.SCHEDULED, expected=[StepStatus.PENDING])
    raise RunParked(step.step_key)


def _create_pending(rp: ReplayPass, step_key: str, fields: dict[str, Any]) -> WorkflowStep:
    step = create_step_in_run(rp.run.pk, rp.holder, step_key, status=StepStatus.PENDING, **fields)
    rp.steps[step_key] = step
    return step
