"""A run handing over to its successor (`wf.continue_as_new`): in one transaction the run ends
`continued`, its successor is created, and what the run was still owed moves to the successor
(the signals and updates no wait took, the parent's step waiting on it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from ...models import WorkflowRun, WorkflowSignal, WorkflowStep, WorkflowUpdate
from ...sql import Statements
from ...status import RunStatus, StepStatus
from .admission_transitions import hand_over_slots_txn, held_slots, lock_keys_txn
from .run_rows import create_run_row
from .run_transitions import move_run
from .tables import engine_names
from .transitions import on_postgresql

STATEMENTS = Statements(Path(__file__).with_name("continue_transitions.sql"), names=engine_names)


def continue_run(run: WorkflowRun, input: Any, *, lease_holder: str) -> WorkflowRun:
    """End `run` continued, while `lease_holder` holds its lease, and return its successor: the
    same workflow, subject, starter, parent and schedule, with `input` (already storable JSON),
    unleased (an inline caller leases it next, else a worker's pass does).

    The successor is admitted as the run was: it takes over the run's concurrency slots (and
    key and priority), so no run queued on those keys starts between two links of the chain.
    The keys' locks come first, as every transition that ends a slot's holder takes them.

    The guarded move then locks the run's row, so a signal sent meanwhile either
    committed before (and moves with the others) or waits and finds the run continued. A second
    hand-over of the same run finds it moved (`InvalidTransition`, `RunInterrupted`) and rolls
    back before creating anything; `continued_from` is unique besides.
    """
    with transaction.atomic():
        lock_keys_txn(held_slots(run.pk))
        move_run(
            run.pk,
            RunStatus.CONTINUED,
            expected=[RunStatus.RUNNING],
            lease_holder=lease_holder,
            keeps_slots=True,
        )
        successor = create_run_row(
            run.workflow,
            input,
            inline=False,
            admitted=True,
            concurrency_key=run.concurrency_key,
            priority=run.priority,
            schedule_id=run.schedule_id,
            scheduled_for=run.scheduled_for,
            continued_from_id=run.pk,
            started_by_id=run.started_by_id,
            subject_type_id=run.subject_type_id,
            subject_id=run.subject_id,
            parent_run_id=run.parent_run_id,
            parent_step_id=run.parent_step_id,
        )
        hand_over_slots_txn(run.pk, successor.pk)
        WorkflowUpdate.objects.filter(run_id=run.pk, signal__consumed_at__isnull=True).update(
            run_id=successor.pk
        )
        WorkflowSignal.objects.filter(run_id=run.pk, consumed_at__isnull=True).update(
            run_id=successor.pk
        )
        if run.parent_step_id is not None:
            # The parent waits for the chain's end, which is now its successor's.
            WorkflowStep.objects.filter(
                pk=run.parent_step_id, child_run_id=run.pk, status=StepStatus.WAITING
            ).update(child_run_id=successor.pk)
    return successor


def successor_of(run_id: Any) -> Any:
    """The id of the run that continues `run_id`, or None."""
    runs = WorkflowRun.objects.filter(continued_from_id=run_id)
    return runs.values_list("pk", flat=True).first()


def chain_from(run_id: Any) -> list[Any]:
    """`run_id` and the ids of the runs that continue it, in order: on PostgreSQL one statement
    however long the chain (a caller that names a chain by its first run pays nothing per link),
    elsewhere a query per link."""
    if on_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["chain_from"], {"run_id": run_id})
            return [row[0] for row in cursor.fetchall()] or [run_id]
    chain = [run_id]
    while (successor := successor_of(chain[-1])) is not None:
        chain.append(successor)
    return chain


def chain_and_latest_run(run_id: Any) -> tuple[list[Any], dict[str, Any]] | None:
    """The chain from `run_id` (`chain_from`) and its latest run's workflow, input and state;
    None for an unknown run. On PostgreSQL one statement."""
    if not on_postgresql():
        chain = chain_from(run_id)
        latest = WorkflowRun.objects.filter(pk=chain[-1]).values("workflow", "input", "state")
        found = latest.first()
        return None if found is None else (chain, dict(found))
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["chain_and_latest_run"], {"run_id": run_id})
        row = cursor.fetchone()
    if row is None:
        return None
    chain, workflow, input, state = row
    return chain, {"workflow": workflow, "input": _loaded(input), "state": _loaded(state)}


def _loaded(column: Any) -> Any:
    # Django reads jsonb as text (its JSONField parses it); so does this cursor.
    return json.loads(column) if isinstance(column, str) else column


def latest_in_chain(run_id: Any) -> Any:
    """The id of the run that goes on for `run_id`: itself, or its last successor."""
    return chain_from(run_id)[-1]
