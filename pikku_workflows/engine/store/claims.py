"""Every row lock the engine takes: on PostgreSQL the run-guard fragments of `claims.sql` that
the transitions' statements compose in; here the locks of one known step (a worker's or a
pass's claim of a new attempt), of a running run (its other writers wait), the timer loop's
batches of due timers and due reminders, an approval being decided, and a run receiving a
signal, a run whose gather member settles, the runs a purge takes (with the purger's own
lock) or a fork copies from, and schedules: the timer loop's batches of due schedules and
running backfills, and one schedule an operator changes. `claims.sql` states the lock order that keeps them from deadlocking: a step before its
run wherever a transaction waits for both, and a step before its approval (the timer loop
holds a due step when it reads its approval, so deciders take the step first too).

Locks live only as long as the short transaction that takes them; user code runs after the
commit. Lapses and due times are judged on the database clock, in the locking read itself.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, Q

from ...control_flow import RunInterrupted
from ...models import (
    WorkflowApproval,
    WorkflowBackfill,
    WorkflowRun,
    WorkflowSchedule,
    WorkflowSlotCount,
    WorkflowStep,
)
from ...querysets import DatabaseNow, StatementNow
from ...schedules.choices import BUFFERING_OVERLAPS, BackfillStatus
from ...sql import Statements
from ...status import ApprovalStatus, RunStatus, StepStatus
from ...waiting import AdmissionReason
from .tables import engine_names

# What a purged run's tombstone keeps of it.
TOMBSTONE_FIELDS = (
    "id",
    "workflow",
    "status",
    "finished_at",
    "idempotency_key",
    "idempotency_scope",
    "started_by_id",
)

STATEMENTS = Statements(Path(__file__).with_name("claims.sql"), names=engine_names)
# How long the claim of one known step waits for another transaction's row lock.
STEP_LOCK_TIMEOUT = "5s"
# The advisory lock key of the purger (any constant no other code of the database uses).
PURGER_LOCK_KEY = 0x70696B6B75_7072


def lock_step_txn(run_id: Any, step_key: str, lease_holder: str | None = None) -> Any:
    """Inside a transaction: the step of a running run (run under `lease_holder`'s lease when
    given), its row locked and its run's row shared (a cancel or suspend committing meanwhile
    is waited for, then seen), annotated with `lease_lapsed`, `retry_due` and `rate_wait`
    on the database clock; None when there is no such step, or its run is not running (under that lease)."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # Wait briefly rather than skip: skipping a locked row could drop the only message.
            cursor.execute(f"SET LOCAL lock_timeout = '{STEP_LOCK_TIMEOUT}'")
    step = _lock_step_row_txn(run_id, step_key)
    if step is None or not _share_running_run_txn(run_id, lease_holder):
        return None
    return step


def _share_running_run_txn(run_id: Any, lease_holder: str | None) -> bool:
    """Share the run row while it is running (under `lease_holder`'s lease when given)."""
    if connection.vendor != "postgresql":
        runs = WorkflowRun.objects.filter(pk=run_id, status=RunStatus.RUNNING)
        if lease_holder is not None:
            runs = runs.filter(lease_holder=lease_holder)
        return runs.exists()  # SQLite has one writer at a time: nothing to share
    params = {"run_id": run_id, "run_running": RunStatus.RUNNING, "lease_holder": lease_holder}
    statement = "run_running_held" if lease_holder is None else "run_held_by_pass"
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS[statement], params)
        return cursor.fetchone() is not None


def _lock_step_row_txn(run_id: Any, step_key: str) -> Any:
    return (
        WorkflowStep.objects.select_for_update(of=("self",), no_key=True)
        .select_related("run__started_by")
        .filter(run_id=run_id, step_key=step_key)
        .annotate(
            lease_lapsed=ExpressionWrapper(
                Q(lease_expires_at__lt=DatabaseNow()), output_field=BooleanField()
            ),
            retry_due=ExpressionWrapper(
                Q(wake_at__isnull=True) | Q(wake_at__lte=DatabaseNow()),
                output_field=BooleanField(),
            ),
            # How long until the time a rate gave the step's next attempt.
            rate_wait=ExpressionWrapper(
                F("not_before") - DatabaseNow(), output_field=DurationField()
            ),
        )
        .first()
    )


def lock_running_run_txn(run_id: Any, lease_holder: str) -> None:
    """Inside a transaction: prove the run is still running under this pass, and keep it so.

    The row lock (FOR NO KEY UPDATE, which a cancel or suspend also needs) lasts until the short
    transaction commits: a cancelled or suspended run starts nothing new. It writes nothing, so
    a step costs the run row no new version. (On PostgreSQL the hot paths take the same guard
    inside their one statement: `run_held_by_pass` in claims.sql.)
    """
    assert transaction.get_connection().in_atomic_block
    runs = WorkflowRun.objects.select_for_update(no_key=True, of=("self",)).filter(
        pk=run_id, status=RunStatus.RUNNING, lease_holder=lease_holder
    )
    if not runs.values_list("pk", flat=True)[:1]:
        raise RunInterrupted(f"run {run_id} is no longer running under this pass")


def lock_due_timers_txn(limit: int) -> list[WorkflowStep]:
    """Inside a transaction: up to `limit` due timer rows (sleeps, retry backoffs) of running
    runs, oldest due first, skipping rows another transaction holds (another timer loop)."""
    assert transaction.get_connection().in_atomic_block
    return list(
        WorkflowStep.objects.due()
        .filter(run__status=RunStatus.RUNNING)
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("wake_at")[:limit]
    )


def lock_steps_waiting_for_slot_txn(limit_name: str, count: int) -> list[WorkflowStep]:
    """Inside the transaction that frees a slot of the limit (its count row held): up to `count`
    steps of running runs whose next attempt waits for one, oldest step first, skipping rows
    another transaction holds (a claim of that step: it takes a slot itself or waits again)."""
    assert transaction.get_connection().in_atomic_block
    return list(
        WorkflowStep.objects.filter(
            status__in=[StepStatus.PENDING, StepStatus.FAILED],
            admission_hold__reason=AdmissionReason.CONCURRENCY.value,
            admission_hold__limit=limit_name,
            run__status=RunStatus.RUNNING,
        )
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("created_at")[:count]
    )


def lock_approval_txn(approval_id: Any) -> WorkflowApproval | None:
    """Inside a transaction: the approval (with its run and step read), its step row locked and
    then its own row, annotated with `deadline_passed` on the database clock; None when there is
    no such approval. Deciders, reassigners and the timer loop all settle an approval through
    this lock, so concurrent decisions are applied one after the other."""
    assert transaction.get_connection().in_atomic_block
    step_id = WorkflowApproval.objects.filter(pk=approval_id).values_list("step_id", flat=True)
    step_rows = WorkflowStep.objects.select_for_update(no_key=True, of=("self",))
    if not list(step_rows.filter(pk__in=step_id).values_list("pk", flat=True)):
        return None
    return (
        WorkflowApproval.objects.select_for_update(no_key=True, of=("self",))
        .select_related("run", "step")
        .annotate(
            deadline_passed=ExpressionWrapper(
                Q(expires_at__lte=DatabaseNow()), output_field=BooleanField()
            )
        )
        .filter(pk=approval_id)
        .first()
    )


def lock_pending_approvals_txn(run_id: Any) -> list[Any]:
    """Inside a transaction: the ids of the run's pending approvals, their rows locked (a
    cancel closes them; a decision committing meanwhile is waited for, then seen)."""
    assert transaction.get_connection().in_atomic_block
    pending = WorkflowApproval.objects.select_for_update(no_key=True, of=("self",)).filter(
        run_id=run_id, status=ApprovalStatus.PENDING
    )
    return list(pending.order_by("created_at").values_list("pk", flat=True))


def lock_due_reminders_txn(limit: int) -> list[WorkflowApproval]:
    """Inside a transaction: up to `limit` pending approvals of running runs whose reminder is
    due by the database clock, oldest due first, skipping rows another transaction holds."""
    assert transaction.get_connection().in_atomic_block
    return list(
        WorkflowApproval.objects.reminder_due()
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("remind_at")[:limit]
    )


def lock_run_for_signals_txn(run_id: Any) -> str | None:
    """Inside a transaction: the run's status, its row held FOR NO KEY UPDATE (what a pass that
    creates a step also takes: a signal sent while the wait for it is being created is applied
    after, and finds the wait); None when there is no such run."""
    assert transaction.get_connection().in_atomic_block
    runs = WorkflowRun.objects.select_for_update(no_key=True, of=("self",)).filter(pk=run_id)
    return runs.values_list("status", flat=True).first()


def lock_run_for_gather_txn(run_id: Any) -> None:
    """Inside a transaction that has just recorded a gather member's outcome (its step row
    locked first): the run's row held FOR NO KEY UPDATE, so members settling at once take turns
    and the last to commit reads every other member's outcome."""
    assert transaction.get_connection().in_atomic_block
    runs = WorkflowRun.objects.select_for_update(no_key=True, of=("self",)).filter(pk=run_id)
    list(runs.values_list("pk", flat=True))


def deadline_passed(approval: WorkflowApproval) -> bool:
    """Whether the approval's deadline had passed by the database clock when
    `lock_approval_txn` read it (the guarded write that settles it judges it again)."""
    return bool(getattr(approval, "deadline_passed", False))


def take_purger_lock_txn() -> bool:
    """Inside a transaction: the purger's lock, held to its end; False when another purge's
    batch holds it (SQLite has one writer at a time: always True)."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["purger_lock"], {"purger_key": PURGER_LOCK_KEY})
        return bool(cursor.fetchone()[0])


def lock_purgeable_runs_txn(runs: Any, limit: int) -> list[dict[str, Any]]:
    """Inside a transaction: up to `limit` of `runs` (a queryset of ended root runs), oldest
    ended first, with what their tombstones keep and the database's clock as `purged_at`; rows
    another transaction holds (a claim, an operator, a fork) are skipped, never waited for."""
    assert transaction.get_connection().in_atomic_block
    return list(
        runs.select_for_update(skip_locked=True, of=("self",))
        .order_by("finished_at", "id")
        .values(*TOMBSTONE_FIELDS, "parent_run_id", "retention_hold", purged_at=DatabaseNow())[
            :limit
        ]
    )


def lock_child_runs_txn(parent_ids: list[Any]) -> tuple[list[dict[str, Any]], set[Any]]:
    """Inside a transaction: the child runs of `parent_ids` whose rows were free, locked, read as
    `lock_purgeable_runs_txn` reads them; and the parents of the children another transaction
    holds (skipped, so their trees stay whole)."""
    assert transaction.get_connection().in_atomic_block
    children = WorkflowRun.objects.filter(parent_run_id__in=parent_ids)
    locked = list(
        children.select_for_update(skip_locked=True, of=("self",)).values(
            *TOMBSTONE_FIELDS, "parent_run_id", "retention_hold", purged_at=DatabaseNow()
        )
    )
    taken = {row["id"] for row in locked}
    held = {parent for pk, parent in children.values_list("pk", "parent_run_id") if pk not in taken}
    return locked, held


def lock_steps_of_runs_txn(run_ids: list[Any]) -> set[Any]:
    """Inside a transaction: the step rows of `run_ids` that were free, locked; returns the runs
    some of whose steps another transaction holds (a claim, a retry re-arming them: skipped, so
    a purge never waits, and never takes its locks in an order a claim could meet backwards)."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["lock_steps_of_purged_runs"], {"run_ids": run_ids})
            return {run_id for (run_id,) in cursor.fetchall()}
    steps = WorkflowStep.objects.filter(run_id__in=run_ids)
    taken = Counter(
        steps.select_for_update(skip_locked=True, of=("self",)).values_list("run_id", flat=True)
    )
    every = Counter(steps.values_list("run_id", flat=True))
    return {run_id for run_id, count in every.items() if taken[run_id] != count}


def share_run_txn(run_id: Any) -> str | None:
    """Inside a transaction: the run's status, its row held FOR NO KEY UPDATE (a fork that copies
    from it: a purge then skips it, and a purge that took it first is waited for, then seen as
    gone); None when there is no such run."""
    assert transaction.get_connection().in_atomic_block
    runs = WorkflowRun.objects.select_for_update(of=("self",), no_key=True).filter(pk=run_id)
    return runs.values_list("status", flat=True).first()


def lock_admission_key_txn(rule: str, key: str) -> int:
    """Inside a transaction: how many slots of `key` under `rule` are held, its count row locked
    until the transaction ends (claims.sql `lock_admission_key`). Whatever frees or hands out
    the key's slots holds it, before any run row."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor != "postgresql":
        count, _ = WorkflowSlotCount.objects.get_or_create(rule=rule, key=key)
        return count.held  # SQLite has one writer at a time: the row is the count only
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["lock_admission_key"], {"rule": rule, "key": key})
        (held,) = cursor.fetchone()
        return int(held)


def lock_due_schedules_txn(
    limit: int, workflows: Any, excluded: Any = ()
) -> list[WorkflowSchedule]:
    """Inside a transaction: up to `limit` unpaused schedules of these workflows (but not the
    `excluded` ids) whose `next_fire_at` has passed on the database clock, soonest first, each
    annotated with `database_now`; rows another transaction holds (another timer loop firing
    them) are skipped, so each due tick is fired by one loop."""
    assert transaction.get_connection().in_atomic_block
    return list(
        WorkflowSchedule.objects.exclude(pk__in=excluded)
        .filter(
            # The partial index pikku_schedule_due serves exactly this predicate: a range scan
            # up to the statement's clock, which (unlike clock_timestamp()) it can compare to.
            paused=False,
            next_fire_at__lte=StatementNow(),
            workflow__in=workflows,
        )
        .annotate(database_now=StatementNow())
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("next_fire_at")[:limit]
    )


def lock_schedule_txn(name: str) -> WorkflowSchedule | None:
    """Inside a transaction: the schedule `name`, its row locked (a firing timer loop holds it
    until it commits: an edit, pause or trigger waits for it, then sees the tick), annotated
    with `database_now`; None when there is no such schedule."""
    assert transaction.get_connection().in_atomic_block
    return (
        WorkflowSchedule.objects.filter(name=name)
        .annotate(database_now=DatabaseNow())
        .select_for_update(of=("self",))
        .first()
    )


def lock_buffering_schedule_of_run_txn(run_id: Any) -> Any:
    """Inside a transaction: the id of the schedule that started run `run_id` if it buffers
    overlapping ticks, its row held FOR NO KEY UPDATE (before the run's row, as a firing takes
    them), else None. A run ending holds it while it admits the schedule's buffered run: a
    firing waits, then sees the run ended or its successor admitted, never a buffered run
    nobody will admit. (Such a firing locks no run but a buffered one, which no pass holds.)"""
    assert transaction.get_connection().in_atomic_block
    schedules = WorkflowSchedule.objects.select_for_update(no_key=True, of=("self",))
    buffering = schedules.filter(runs=run_id, overlap__in=BUFFERING_OVERLAPS)
    return buffering.values_list("pk", flat=True).first()


def lock_running_backfills_txn(limit: int) -> list[WorkflowBackfill]:
    """Inside a transaction: up to `limit` running backfills, oldest first, with their
    schedule read; rows another transaction holds are skipped."""
    assert transaction.get_connection().in_atomic_block
    return list(
        WorkflowBackfill.objects.filter(status=BackfillStatus.RUNNING)
        .select_related("schedule")
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("created_at")[:limit]
    )
