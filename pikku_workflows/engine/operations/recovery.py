"""Recovery: heal what a crash or a lost queue message left behind, from the tables alone; and
the timer loop `pikku_worker` runs beside its cluster.

Each sweep finds work that should be moving and is not, and dispatches it again; claims make a
redundant dispatch harmless. Ages and lapses are judged on the database clock. A per-run
backoff keeps a wedged run from flooding the queue, and starts afresh once the run moves on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Greatest

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration
from ...exceptions import WorkflowDispatchException
from ...models import WorkflowRun, WorkflowStep
from ...outages import outages
from ...querysets import database_ago
from ...status import RunStatus, StepStatus
from ..replay.queued import in_place_hold
from ..store.admission_transitions import admit_stranded
from ..store.run_counts import fold_run_count_changes
from .backfills import advance_backfills
from .purge import purge_by_retention
from .schedule_firing import fire_due_schedules
from .timers import dispatch_woken, fire_due_timers

logger = logging.getLogger(__name__)

BACKOFF_MEMORY = 10_000
# How long past the next sweep a takeover holds in-place running (the sweep may come late).
TAKEOVER_MARGIN_SECONDS = 1.0
# How long one of the timer loop's purges may go on starting batches.
PURGE_SLICE_SECONDS = 0.5


class RedispatchBackoff:
    """Per-run hold between re-dispatches: REDISPATCH_BACKOFF_SECONDS doubling to the max, for
    as long as the run stays stuck at the same point (`progress`); a run that moved on since
    its last relay is relayed at once, its hold back at the first step.

    In memory and bounded (oldest forgotten first); losing it on restart costs a few messages.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holds: OrderedDict[str, tuple[float, float, Any]] = OrderedDict()

    def allow(self, run_id: Any, progress: Any = None) -> bool:
        """True (and the hold noted, before the caller dispatches) unless the run is held."""
        key = str(run_id)
        now = self._clock()
        until, hold, held_at = self._holds.get(key, (0.0, 0.0, progress))
        if held_at != progress:
            until, hold = 0.0, 0.0
        if now < until:
            return False
        hold = min(
            hold * 2 if hold else pikku_settings.REDISPATCH_BACKOFF_SECONDS,
            pikku_settings.REDISPATCH_BACKOFF_MAX_SECONDS,
        )
        self._holds[key] = (now + hold, hold, progress)
        self._holds.move_to_end(key)
        while len(self._holds) > BACKOFF_MEMORY:
            self._holds.popitem(last=False)
        return True


backoff = RedispatchBackoff()


def recover() -> dict[str, int]:
    """One recovery pass: fire due timers, re-dispatch lapsed step leases, relay lost messages,
    resume runs whose pass died holding the run lease and runs stalled with nothing in flight,
    admit queued runs whose key has room, fire due schedules and start the next runs of
    backfills; and fold the run counts' changes. Returns counts by kind."""
    # Runs whose steps this sweep relays: the backoff lets a run through once per sweep, and
    # then every lost step of it goes (a fan-out's messages at once, not one per sweep).
    relaying: set[str] = set()
    counts = {
        "timers": fire_due_timers(),
        "lapsed": _redispatch(_lapsed_steps(), relaying),
        "relayed": _redispatch(_undispatched_steps(), relaying) + _resume(_unstarted_runs()),
        "lapsed_runs": _resume(_lapsed_runs()),
        "stalled": _resume(_stalled_runs()),
        "admitted": admit_stranded(pikku_settings.RECOVERY_BATCH),
        "schedules": fire_due_schedules(),
        "backfills": advance_backfills(),
    }
    fold_run_count_changes()
    if counts["lapsed"] or counts["lapsed_runs"]:
        # A takeover: the passes running now run nothing more in place (until the next sweep at
        # most), so the messages just sent are taken after one step of each busy pass, not its
        # whole budget.
        in_place_hold.hold(pikku_settings.RECOVERY_INTERVAL_SECONDS + TAKEOVER_MARGIN_SECONDS)
    return counts


def _relay_before() -> Any:
    return database_ago(pikku_settings.RELAY_PENDING_AFTER_SECONDS)


def _lapsed_steps() -> list[dict[str, Any]]:
    steps = WorkflowStep.objects.lease_lapsed().filter(run__status=RunStatus.RUNNING)
    return _step_rows(steps)


def _undispatched_steps() -> list[dict[str, Any]]:
    before = _relay_before()
    # A retry whose timer fired but whose message was lost looks the same: failed, due, unclaimed.
    due_retry = Q(status=StepStatus.FAILED, wake_at__isnull=True, attempt__lt=F("attempt_limit"))
    steps = WorkflowStep.objects.filter(
        Q(pk__in=WorkflowStep.objects.undispatched(before).values("pk"))
        | Q(pk__in=WorkflowStep.objects.awaiting_ended_child(before).values("pk"))
        | (due_retry & Q(updated_at__lt=before)),
        run__status=RunStatus.RUNNING,
    )
    return _step_rows(steps)


def _step_rows(steps: Any) -> list[dict[str, Any]]:
    batch = pikku_settings.RECOVERY_BATCH
    rows = steps.annotate(progress=_last_activity("run_id", "run__updated_at"))
    rows = rows.order_by("updated_at").values("run_id", "step_key", "function_name", "progress")
    return list(rows[:batch])


def _redispatch(rows: list[dict[str, Any]], relaying: set[str]) -> int:
    count = 0
    for row in rows:
        run = str(row["run_id"])
        if run not in relaying and not backoff.allow(run, row["progress"]):
            continue
        relaying.add(run)
        try:
            dispatch_woken(row["run_id"], row["step_key"], row["function_name"])
        except WorkflowDispatchException as exc:
            outages.failed(f"relaying step {row['step_key']!r} of run {run}", exc)
            continue
        count += 1
    return count


def _last_activity(run_ref: str, run_updated_at: str) -> Any:
    """When the run, or any of its steps, last changed: the progress the backoff compares, the
    same whichever sweep finds the run."""
    steps = WorkflowStep.objects.filter(run_id=OuterRef(run_ref)).values("run_id")
    latest_step = steps.annotate(at=Max("updated_at")).values("at")
    return Greatest(run_updated_at, Coalesce(Subquery(latest_step), run_updated_at))


def _run_rows(runs: Any) -> list[tuple[Any, Any]]:
    batch = pikku_settings.RECOVERY_BATCH
    rows = runs.annotate(progress=_last_activity("pk", "updated_at")).order_by("updated_at")
    return list(rows.values_list("pk", "progress")[:batch])


def _unstarted_runs() -> list[tuple[Any, Any]]:
    """Running runs whose first pass never came (their start message was lost, or refused)."""
    steps = WorkflowStep.objects.filter(run_id=OuterRef("pk"))
    runs = WorkflowRun.objects.running().lease_free().filter(created_at__lt=_relay_before())
    return _run_rows(runs.filter(~Exists(steps)))


def _lapsed_runs() -> list[tuple[Any, Any]]:
    """Running runs whose pass died holding the run lease (it lapsed unreleased)."""
    return _run_rows(WorkflowRun.objects.lease_lapsed())


def _stalled_runs() -> list[tuple[Any, Any]]:
    before = database_ago(pikku_settings.STALLED_RUN_AFTER_SECONDS)
    return _run_rows(WorkflowRun.objects.stalled(before))


def _resume(rows: list[tuple[Any, Any]]) -> int:
    count = 0
    for run_id, progress in rows:
        if not backoff.allow(run_id, progress):
            continue
        try:
            enqueue_orchestration(run_id)
        except WorkflowDispatchException as exc:
            outages.failed(f"resuming run {run_id}", exc)
            continue
        count += 1
    return count


class RetentionPurges:
    """The timer loop's purges by RETENTION: a short one (PURGE_SLICE_SECONDS of batches) every
    PURGE_INTERVAL_SECONDS, or at the next recovery interval while runs past due remain, so
    timers never wait long behind a purge and a backlog still drains."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next = 0.0

    def purge_when_due(self) -> None:
        if self._clock() < self._next:
            return
        counts = purge_by_retention(max_seconds=PURGE_SLICE_SECONDS)
        more = counts is not None and counts["more"]
        self._next = self._clock() + (
            pikku_settings.RECOVERY_INTERVAL_SECONDS
            if more
            else pikku_settings.PURGE_INTERVAL_SECONDS
        )
        if counts is not None and counts["runs"]:
            logger.info("pikku_workflows: retention purged %s runs", counts["runs"])


def run_timer_loop(stop: threading.Event, on_tick: Callable[[], None] | None = None) -> None:
    """Fire due timers and due schedules every TIMER_POLL_SECONDS, run recovery every
    RECOVERY_INTERVAL_SECONDS and purge by RETENTION every PURGE_INTERVAL_SECONDS until `stop`
    is set; `on_tick` runs on every tick (pikku_worker's heartbeat). Errors go to the outage log
    and the loop goes on (the database may come back)."""
    next_recovery = 0.0
    retention = RetentionPurges()
    while not stop.is_set():
        try:
            if on_tick is not None:
                on_tick()
            fired = fire_due_timers() + fire_due_schedules()
            if time.monotonic() >= next_recovery:
                counts = recover()
                next_recovery = time.monotonic() + pikku_settings.RECOVERY_INTERVAL_SECONDS
                if any(counts.values()):
                    logger.info("pikku_workflows: recovery %s", counts)
            retention.purge_when_due()
        except Exception as exc:
            outages.failed("the timer loop", exc)
            close_old_connections()
            fired = 0
        else:
            outages.check()
        if not fired:
            stop.wait(pikku_settings.TIMER_POLL_SECONDS)
