"""Firing due schedules, from the timer loop and `pw.recover()`: exactly once with any number
of loops (docs/schedules.md, "Firing").

One short transaction per batch: the due rows are claimed `skip_locked` (another loop takes
the next ones), each due tick gets its unique tick row and at most one run (idempotency key
`schedule:<name>:<nominal>`), and `next_fire_at` moves past the database clock's now in the
same commit. A loop killed mid-batch rolls all of it back; another loop fires it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import BooleanField, ExpressionWrapper

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration_with_run, queue_in_engine_database
from ...models import WorkflowRun, WorkflowSchedule
from ...observability.instruments import record_fire_delay_after_commit
from ...outages import outages
from ...registry import registry
from ...schedules.catch_up import ticks_to_start
from ...schedules.choices import MAX_BUFFERED_RUNS, Overlap, TickOutcome
from ...schedules.fire_times import fire_times
from ...schedules.jitter import jitter_delay
from ...schedules.spec import ScheduleSpec
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ..store import claims, overlap_transitions, schedule_rows, schedule_transitions
from ..store.overlap_transitions import BUFFERED
from ..store.run_rows import admits_without_a_statement, create_run_row
from ..store.transitions import on_postgresql
from .control import cancel_run
from .runs import start_run

# Schedules claimed per transaction: small, so several loops share a burst of due schedules.
CLAIM_BATCH = 50
# The most due ticks one firing judges (an every="1s" schedule paused for a day has 86,400).
MAX_DUE_TICKS = 1000
ONE_MICROSECOND = timedelta(microseconds=1)
# Overlaps under which a tick starts its run whatever else is going (cancel_other cancels it).
FREE_OVERLAPS = (Overlap.ALLOW_ALL, Overlap.CANCEL_OTHER)


def fire_due_schedules() -> int:
    """Fire every due schedule this process knows the workflow of, up to SCHEDULE_BATCH; the
    number of schedules fired."""
    workflows = list(registry.workflows)
    fired = 0
    while fired < pikku_settings.SCHEDULE_BATCH:
        limit = min(CLAIM_BATCH, pikku_settings.SCHEDULE_BATCH - fired)
        try:
            with transaction.atomic():
                due = claims.lock_due_schedules_txn(limit, workflows)
                fire_schedules_txn(due)
            count = len(due)
        except DatabaseError as exc:
            # The batch rolled back whole; one transaction per schedule lets the others fire
            # while the one whose statement fails waits for the next tick.
            outages.failed("firing a batch of due schedules", exc)
            count = _fire_one_by_one(limit, workflows)
        fired += count
        if count < limit:
            return fired
    return fired


def _fire_one_by_one(limit: int, workflows: list[str]) -> int:
    fired, failed = 0, list[Any]()
    while fired + len(failed) < limit:
        due: list[WorkflowSchedule] = []
        try:
            with transaction.atomic():
                due = claims.lock_due_schedules_txn(1, workflows, excluded=failed)
                if not due:
                    return fired
                fire_schedule_txn(due[0], due[0].database_now)  # type: ignore[attr-defined]
            fired += 1
        except DatabaseError as exc:
            if not due:
                raise  # the claim itself failed: the database is down, not one schedule
            failed.append(due[0].pk)
            outages.failed(f"firing schedule {due[0].name!r}", exc)
    return fired


def fire_schedules_txn(due: list[WorkflowSchedule]) -> None:
    """Inside a transaction holding the rows of the `due` schedules: fire each. Their runs are
    read in one query; the firings of a single tick that starts a run (of a workflow admitted
    without a statement), skips or misses are written together: their ticks, runs and messages
    in one statement, their next ticks in another. The others write as they go."""
    runs = _live_runs_of([schedule for schedule in due if schedule.overlap != Overlap.ALLOW_ALL])
    batch = _Batch() if on_postgresql() and queue_in_engine_database() else None
    for schedule in due:
        now = schedule.database_now  # type: ignore[attr-defined]
        fire_schedule_txn(schedule, now, runs=runs.get(schedule.pk, []), batch=batch)
    if batch is not None:
        batch.write()


def fire_schedule_txn(
    schedule: WorkflowSchedule,
    now: datetime,
    *,
    runs: list[tuple[Any, str, bool]] | None = None,
    batch: _Batch | None = None,
) -> None:
    """Inside a transaction holding the schedule's row: record and start its due ticks as the
    catch-up and overlap rules say, and move it to its next tick after `now`. `runs`: its live
    runs, read already (`_live_runs_of`); `batch`: where a simple firing is written."""
    assert transaction.get_connection().in_atomic_block
    spec = schedule_rows.spec_of(schedule)
    due = list(_due_ticks(schedule, spec, now))
    window = timedelta(milliseconds=spec.catch_up_window_ms)
    starts = ticks_to_start(
        due, now, catch_up=spec.catch_up, window=window, catch_up_max=spec.catch_up_max
    )
    firing = _Firing(schedule, spec, now, runs)
    after = max(now, due[-1]) if due else now
    next_nominal, next_fire = schedule_rows.next_tick(spec, after)
    advance = {"next_nominal_at": next_nominal, "next_fire_at": next_fire, "last_fired_at": now}
    if batch is not None and not due:  # its jitter has not passed, or the rule changed
        batch.advances[schedule.pk] = {
            **advance,
            "last_outcome": schedule.last_outcome,
            "skipped_in_a_row": schedule.skipped_in_a_row,
        }
        return
    alone = firing.judge_alone(due[0], starts[0]) if batch is not None and len(due) == 1 else None
    if batch is not None and alone is not None:
        batch.add(firing, due[0], *alone, advance)
        return
    for nominal, start in zip(due, starts, strict=True):
        firing.tick(nominal, start)
    schedule_transitions.advance_schedule(
        schedule.pk,
        **advance,
        last_outcome=firing.last_outcome or schedule.last_outcome,
        skipped_in_a_row=firing.skipped_in_a_row,
    )


def _live_runs_of(schedules: list[WorkflowSchedule]) -> dict[Any, list[tuple[Any, str, bool]]]:
    """The runs of `schedules` not ended, by schedule, in tick order: (id, status, buffered)."""
    if not schedules:
        return {}
    runs = WorkflowRun.objects.filter(schedule__in=schedules).exclude(
        status__in=TERMINAL_RUN_STATUSES
    )
    waiting = runs.annotate(buffered=ExpressionWrapper(BUFFERED, output_field=BooleanField()))
    ordered = waiting.order_by("scheduled_for", "created_at", "id")
    live: dict[Any, list[tuple[Any, str, bool]]] = {}
    rows = ordered.values_list("schedule_id", "pk", "status", "buffered")
    for schedule_id, run_id, status, buffered in rows:
        live.setdefault(schedule_id, []).append((run_id, status, buffered))
    return live


class _Batch:
    """Firings of one tick each, written together once the batch's schedules are judged."""

    def __init__(self) -> None:
        self.ticks: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.advances: dict[Any, dict[str, Any]] = {}

    def add(
        self,
        firing: _Firing,
        nominal: datetime,
        outcome: str,
        reason: str,
        advance: dict[str, Any],
    ) -> None:
        schedule = firing.schedule
        run_id = uuid.uuid4() if outcome == TickOutcome.STARTED else None
        self.ticks.append(
            {
                "schedule_id": schedule.pk,
                "nominal_at": nominal,
                "fired_at": firing.now,
                "outcome": outcome,
                "run_id": run_id,
                "reason": reason,
            }
        )
        if run_id is not None:
            self.runs.append(_scheduled_run_fields(schedule, nominal, run_id))
        skipped = firing.skipped_in_a_row
        if outcome == TickOutcome.SKIPPED:
            skipped += 1
        elif run_id is not None:
            skipped = 0
        self.advances[schedule.pk] = {
            **advance,
            "last_outcome": outcome,
            "skipped_in_a_row": skipped,
        }

    def write(self) -> None:
        if self.ticks:
            schedule_rows.write_fired_ticks_txn(self.ticks, self.runs)
        schedule_transitions.advance_schedules(self.advances)


def _due_ticks(schedule: WorkflowSchedule, spec: ScheduleSpec, now: datetime) -> Iterator[datetime]:
    """The nominal times due by `now` (their jitter passed too), oldest first: from the row's
    next tick, or from the start of the catch-up window when that is later (older ticks are
    missed without a row each: a schedule paused for a year writes no year of rows)."""
    if schedule.next_nominal_at is None:
        return
    window = timedelta(milliseconds=spec.catch_up_window_ms)
    oldest = max(schedule.next_nominal_at, now - window - timedelta(minutes=1))
    for count, nominal in enumerate(fire_times(spec.rule, oldest - ONE_MICROSECOND)):
        if (
            count >= MAX_DUE_TICKS
            or nominal + jitter_delay(spec.name, nominal, spec.jitter_ms) > now
        ):
            return
        yield nominal


class _Firing:
    """One firing of a schedule: its ticks written in order, its runs started or buffered."""

    def __init__(
        self,
        schedule: WorkflowSchedule,
        spec: ScheduleSpec,
        now: datetime,
        runs: list[tuple[Any, str, bool]] | None = None,
    ) -> None:
        self.schedule, self.spec, self.now = schedule, spec, now
        self.skipped_in_a_row = schedule.skipped_in_a_row
        self.last_outcome = ""
        self.failed_run = _failed_run_to_pause_for(schedule)
        # allow_all starts whatever runs: it needs no read of them.
        self.active: list[tuple[Any, str]] = []
        self.buffered: list[Any] = []
        if spec.overlap != Overlap.ALLOW_ALL:
            self._sort_runs(self._read_runs() if runs is None else runs)
        if self.buffered and not self.active:
            # Buffered runs nobody admits (the overlap changed from buffering since their run
            # before ended): the oldest goes first.
            overlap_transitions.admit_buffered_txn(schedule.pk)
            self.active, self.buffered = [], []
            self._sort_runs(self._read_runs())

    def _read_runs(self) -> list[tuple[Any, str, bool]]:
        return _live_runs_of([self.schedule]).get(self.schedule.pk, [])

    def _sort_runs(self, runs: list[tuple[Any, str, bool]]) -> None:
        for run_id, status, buffered in runs:
            if buffered:
                self.buffered.append(run_id)
            else:
                self.active.append((run_id, status))

    def judge_alone(self, nominal: datetime, start: bool) -> tuple[str, str] | None:
        """The outcome and reason of this firing's only tick when writing it needs nothing but
        its tick row and run row (`_Batch`); else None."""
        outcome, reason = self._judge(nominal, start)
        if outcome == TickOutcome.BUFFERED:
            return None
        if outcome == TickOutcome.STARTED:
            if self.spec.overlap == Overlap.CANCEL_OTHER and (self.active or self.buffered):
                return None
            if not admits_without_a_statement(self.schedule.workflow):
                return None
        return outcome, reason

    def tick(self, nominal: datetime, start: bool) -> None:
        outcome, reason = self._judge(nominal, start)
        with_run = outcome in (TickOutcome.STARTED, TickOutcome.BUFFERED)
        run_id = uuid.uuid4() if with_run else None
        tick = schedule_rows.write_tick_txn(
            self.schedule, nominal, self.now, outcome, reason=reason, run_id=run_id
        )
        if tick is None:
            return  # this nominal time has its tick already (a backfill took it)
        self.last_outcome = outcome
        if outcome == TickOutcome.SKIPPED:
            self.skipped_in_a_row += 1
        if run_id is None:
            return
        self.skipped_in_a_row = 0
        if outcome == TickOutcome.BUFFERED:
            create_run_row(**_scheduled_run_fields(self.schedule, nominal, run_id), buffered=True)
            self.buffered.append(run_id)
            return
        self._cancel_others(nominal)
        start_run_row_txn(self.schedule, nominal, run_id)
        record_fire_delay_after_commit((self.now - nominal).total_seconds())
        self.active.append((run_id, RunStatus.RUNNING))

    def _judge(self, nominal: datetime, start: bool) -> tuple[str, str]:
        if not start:
            late = self.now - nominal
            return TickOutcome.MISSED, (
                f"{_readable(late)} late (the timer loops were down, or the schedule paused); "
                f"catch_up={self.spec.catch_up}"
            )
        if self.failed_run is not None:
            return TickOutcome.SKIPPED, f"run {self.failed_run} failed: the schedule pauses"
        if not (self.active or self.buffered) or self.spec.overlap in FREE_OVERLAPS:
            return TickOutcome.STARTED, ""
        if self.spec.overlap == Overlap.SKIP:
            return TickOutcome.SKIPPED, f"overlap=skip: {self._holder()}"
        return self._judge_buffer()

    def _judge_buffer(self) -> tuple[str, str]:
        overlap = self.spec.overlap
        if overlap == Overlap.BUFFER_ONE and self.buffered:
            return TickOutcome.SKIPPED, f"overlap=buffer_one: run {self.buffered[0]} already waits"
        if len(self.buffered) >= MAX_BUFFERED_RUNS:
            return TickOutcome.DROPPED, (
                f"overlap=buffer_all: {MAX_BUFFERED_RUNS} runs already wait, the most it keeps"
            )
        return TickOutcome.BUFFERED, f"overlap={overlap}: queued until {self._holder()} ends"

    def _holder(self) -> str:
        """The run that holds the schedule's overlap (the newest going, else the newest
        buffered), in words."""
        if self.active:
            run_id, status = self.active[-1]
            return f"run {run_id} is still {status}"
        return f"run {self.buffered[-1]} is still queued"

    def _cancel_others(self, nominal: datetime) -> None:
        if self.spec.overlap != Overlap.CANCEL_OTHER:
            return
        others = [run_id for run_id, _ in self.active] + self.buffered
        for run_id in others:
            cancel_run(
                run_id,
                reason=f"overlap=cancel_other: the tick at {nominal.isoformat()} replaced it",
            )
        self.active.clear()
        self.buffered.clear()


def _failed_run_to_pause_for(schedule: WorkflowSchedule) -> Any:
    """The failed run a `pause_on_failure` schedule has not paused for yet (its pause is made
    after the failure commits; a crash in between is caught here), else None."""
    if not schedule.pause_on_failure:
        return None
    latest = WorkflowRun.objects.filter(schedule=schedule).order_by("-created_at")
    run = latest.values("pk", "status", "finished_at").first()
    if run is None or run["status"] != RunStatus.FAILED:
        return None
    if run["finished_at"] is not None and run["finished_at"] < schedule.updated_at:
        return None  # failed before the schedule last changed (it was resumed since)
    schedule_transitions.pause_for_failed_run(run["pk"])
    return run["pk"]


def scheduled_run_key(name: str, nominal: datetime) -> str:
    """The idempotency key of the run a tick starts: one run per (schedule, nominal time)."""
    return f"schedule:{name}:{nominal.isoformat()}"


def start_run_row_txn(schedule: WorkflowSchedule, nominal: datetime, run_id: Any) -> None:
    """Inside the firing's transaction: the run of the tick at `nominal` (its input checked when
    the schedule was defined), and its message in the same commit where the queue allows."""
    create_run_row(**_scheduled_run_fields(schedule, nominal, run_id))
    enqueue_orchestration_with_run(run_id)


def _scheduled_run_fields(
    schedule: WorkflowSchedule, nominal: datetime, run_id: Any
) -> dict[str, Any]:
    return {
        "workflow": schedule.workflow,
        "input": schedule.input,
        "inline": False,
        "id": run_id,
        "idempotency_key": scheduled_run_key(schedule.name, nominal),
        "schedule": schedule,
        "scheduled_for": nominal,
    }


def start_scheduled_run(
    schedule: WorkflowSchedule, nominal: datetime, *, key: str, by: Any = None
) -> str:
    run_id, _ = start_run(
        schedule.workflow,
        schedule.input,
        idempotency_key=key,
        started_by=by,
        origin={"schedule": schedule, "scheduled_for": nominal},
    )
    return run_id


def _readable(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"
