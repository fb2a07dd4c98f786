"""A gather's steps (`wf.gather`, `wf.map`): its new queued members written and dispatched in
one statement (`gather_transitions.sql`), and each member's outcome recorded by the step's own
transition, then judged against the other members in the same transaction, so the run is woken
once, by the member that settles the gather last, however many settle at the same moment.

The members take turns on the run's row (claims: a step before its run): the last to commit
reads every other member's outcome committed, and none before it can read its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from ...control_flow import RunInterrupted
from ...dispatch import QueueMessage, messages_params, queue_fragments
from ...models import WorkflowRun, WorkflowStep
from ...sql import Statements
from ...status import RunStatus, StepDispatch, StepStatus
from .claims import lock_run_for_gather_txn
from .leases import acquire_run_lease
from .run_list_fields import parked_list_params
from .step_transitions import note_attempt_end, record_step_outcome
from .tables import engine_names

STATEMENTS = Statements(
    Path(__file__).with_name("gather_transitions.sql"),
    Path(__file__).with_name("step_transitions.sql"),
    Path(__file__).with_name("claims.sql"),
    names=engine_names,
    fragments=queue_fragments,
)
# The columns of a new queued step that differ from one step to the next.
STEP_COLUMNS = (
    "step_key",
    "kind",
    "function_name",
    "data",
    "attempt_limit",
    "retries",
    "retry_delay",
    "timeout_ms",
    "from_step_key",
    "atomic",
    "gather_key",
)


def create_dispatched_steps(
    run_id: Any, lease_holder: str, steps: Sequence[WorkflowStep], messages: Sequence[QueueMessage]
) -> bool:
    """Insert `steps` (new, unsaved) straight into `scheduled`, each with its history row and its
    queue message (`messages`, in the same order), and release the run lease: one statement
    (PostgreSQL with django-q2's queue in this database). Returns whether the lease was released
    (False: a rerun was asked for, and the caller still holds it)."""
    rows = [
        {
            "id": str(step.pk),
            **{column: getattr(step, column) for column in STEP_COLUMNS},
            "created_at": step.created_at.isoformat(),
        }
        for step in steps
    ]
    params = {
        "run_id": run_id,
        "lease_holder": lease_holder,
        "run_running": RunStatus.RUNNING,
        "scheduled": StepStatus.SCHEDULED,
        "queued": StepDispatch.QUEUED,
        "steps": json.dumps(rows),
        **parked_list_params([step.step_key for step in steps]),
        **messages_params(
            {step.pk: message for step, message in zip(steps, messages, strict=True)}
        ),
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["insert_dispatched_steps"], params)
        row = cursor.fetchone()
    if row is None:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")
    released, written, _ = row
    assert written == len(steps), "every message is written with its step"
    for step in steps:
        step.status, step.attempt = StepStatus.SCHEDULED, 1
        step._state.adding, step._state.db = False, connection.alias
        note_attempt_end(step, None)
    return bool(released)


def record_member_outcome(
    step: WorkflowStep, target: str, *, take_run_lease_for: str | None = None, **outcome: Any
) -> tuple[WorkflowRun | None, bool]:
    """`record_step_outcome` for a gather's member (fenced by attempt as ever: StepSuperseded,
    nothing written); returns the run leased to `take_run_lease_for` (when asked, the gather
    settled and the lease was free) and whether this outcome settled the gather: every member
    succeeded or spent its attempts."""
    with transaction.atomic():
        record_step_outcome(step, target, **outcome)
        lock_run_for_gather_txn(step.run_id)
        members = WorkflowStep.objects.filter(run_id=step.run_id, gather_key=step.gather_key)
        settled = not members.unsettled().exists()
        if not (settled and take_run_lease_for):
            return None, settled
        if not acquire_run_lease(step.run_id, take_run_lease_for):
            return None, True
        return WorkflowRun.objects.select_related("started_by").get(pk=step.run_id), True
