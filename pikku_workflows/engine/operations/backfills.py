"""Working through backfills a batch at a time (from `pw.recover()`): each pass of a running
backfill starts its next nominal times, in order, while fewer than `max_active` of its runs
are going, and notes how far it got: a ten-year hourly backfill never builds its runs in one
transaction."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import islice, takewhile

from django.db import transaction
from django.utils import timezone

from ...models import WorkflowBackfill, WorkflowScheduleTick
from ...schedules.choices import BackfillStatus, TickOutcome
from ...schedules.fire_times import fire_times
from ...status import TERMINAL_RUN_STATUSES
from ..store import claims, schedule_rows, schedule_transitions
from .schedule_firing import start_scheduled_run
from .schedules import nominal_times_taken

# Backfills advanced per pass, and nominal times looked at per backfill per pass.
BACKFILLS_PER_PASS = 10
SCAN_PER_PASS = 1000
ONE_MICROSECOND = timedelta(microseconds=1)


def advance_backfills() -> int:
    """Start the next runs of every running backfill that has room; the number started."""
    with transaction.atomic():
        return sum(
            advance_backfill_txn(backfill)
            for backfill in claims.lock_running_backfills_txn(BACKFILLS_PER_PASS)
        )


def advance_backfill_txn(backfill: WorkflowBackfill) -> int:
    """Inside a transaction holding the backfill's row: start its next nominal times while
    fewer than `max_active` of its runs are going; complete it past its last one."""
    room = backfill.max_active - _going(backfill)
    if room <= 0:
        return 0
    schedule = backfill.schedule
    spec = schedule_rows.spec_of(schedule)
    begin = backfill.cursor or backfill.start - ONE_MICROSECOND
    scanned = list(
        islice(takewhile(lambda t: t < backfill.end, fire_times(spec.rule, begin)), SCAN_PER_PASS)
    )
    taken = (
        nominal_times_taken(schedule, scanned[0], scanned[-1] + ONE_MICROSECOND, backfill.reprocess)
        if scanned
        else set()
    )
    started, cursor = 0, backfill.cursor
    for nominal in scanned:
        if started == room:
            break
        cursor = nominal
        if nominal in taken:
            continue
        _start(backfill, nominal)
        started += 1
    reached_end = len(scanned) < SCAN_PER_PASS
    finished = reached_end and (not scanned or cursor == scanned[-1])
    WorkflowBackfill.objects.filter(pk=backfill.pk).update(
        cursor=cursor, started=backfill.started + started
    )
    if finished:
        schedule_transitions.move_backfill(backfill.pk, BackfillStatus.COMPLETED)
    return started


def _going(backfill: WorkflowBackfill) -> int:
    ticks = WorkflowScheduleTick.objects.filter(backfill=backfill, run__isnull=False)
    return ticks.exclude(run__status__in=TERMINAL_RUN_STATUSES).count()


def _start(backfill: WorkflowBackfill, nominal: datetime) -> None:
    schedule = backfill.schedule
    key = f"backfill:{backfill.pk}:{schedule.name}:{nominal.isoformat()}"
    run_id = start_scheduled_run(schedule, nominal, key=key, by=backfill.created_by)
    reason = f"backfill {backfill.pk}"
    existing = WorkflowScheduleTick.objects.filter(schedule=schedule, nominal_at=nominal)
    if existing.update(
        run_id=run_id, outcome=TickOutcome.BACKFILL, backfill=backfill, reason=reason
    ):
        return
    tick = schedule_rows.write_tick_txn(
        schedule, nominal, timezone.now(), TickOutcome.BACKFILL, reason=reason, backfill=backfill
    )
    if tick is not None:
        schedule_rows.set_tick_run(tick, run_id, TickOutcome.BACKFILL, reason)
