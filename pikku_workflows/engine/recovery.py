"""Recovery: heal what a crash or a lost queue message left behind, from the tables alone.

Each sweep finds work that should be moving and is not, and dispatches it again; claims make a
redundant dispatch harmless. A per-run backoff keeps a wedged run from flooding the queue.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from ..conf import pikku_settings
from ..dispatch import enqueue_orchestration
from ..exceptions import WorkflowDispatchException
from ..models import WorkflowRun, WorkflowStep
from ..status import RunStatus, StepStatus
from .timers import dispatch_woken, fire_due_timers

logger = logging.getLogger(__name__)

BACKOFF_MEMORY = 10_000


class RedispatchBackoff:
    """Per-run hold between re-dispatches: REDISPATCH_BACKOFF_SECONDS doubling to the max.

    In memory and bounded (oldest forgotten first); losing it on restart costs a few messages.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holds: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def allow(self, run_id: Any) -> bool:
        """True (and the hold noted, before the caller dispatches) unless the run is held."""
        key = str(run_id)
        now = self._clock()
        until, hold = self._holds.get(key, (0.0, 0.0))
        if now < until:
            return False
        hold = min(
            hold * 2 if hold else pikku_settings.REDISPATCH_BACKOFF_SECONDS,
            pikku_settings.REDISPATCH_BACKOFF_MAX_SECONDS,
        )
        self._holds[key] = (now + hold, hold)
        self._holds.move_to_end(key)
        while len(self._holds) > BACKOFF_MEMORY:
            self._holds.popitem(last=False)
        return True


backoff = RedispatchBackoff()


def recover() -> dict[str, int]:
    """One recovery pass: fire due timers, re-dispatch lapsed leases, relay lost messages,
    resume stalled runs. Returns counts by kind."""
    return {
        "timers": fire_due_timers(),
        "lapsed": _redispatch(_lapsed_steps()),
        "relayed": _redispatch(_undispatched_steps()),
        "stalled": _resume(_stalled_runs()),
    }


def _lapsed_steps() -> list[dict[str, Any]]:
    steps = WorkflowStep.objects.lease_lapsed().filter(run__status=RunStatus.RUNNING)
    return _step_rows(steps)


def _undispatched_steps() -> list[dict[str, Any]]:
    before = timezone.now() - timedelta(seconds=pikku_settings.RELAY_PENDING_AFTER_SECONDS)
    # A retry whose timer fired but whose message was lost looks the same: failed, due, unclaimed.
    due_retry = Q(status=StepStatus.FAILED, wake_at__isnull=True, attempt__lt=F("attempt_limit"))
    steps = WorkflowStep.objects.filter(
        Q(pk__in=WorkflowStep.objects.undispatched(before).values("pk"))
        | (due_retry & Q(updated_at__lt=before)),
        run__status=RunStatus.RUNNING,
    )
    return _step_rows(steps)


def _step_rows(steps: Any) -> list[dict[str, Any]]:
    batch = pikku_settings.RECOVERY_BATCH
    return list(steps.order_by("updated_at").values("run_id", "step_key", "function_name")[:batch])


def _redispatch(rows: list[dict[str, Any]]) -> int:
    count = 0
    for row in rows:
        if not backoff.allow(row["run_id"]):
            continue
        try:
            dispatch_woken(row["run_id"], row["step_key"], row["function_name"])
        except WorkflowDispatchException:
            logger.warning("pikku_workflows: relay of %s failed; will retry", row["step_key"])
            continue
        count += 1
    return count


def _stalled_runs() -> list[Any]:
    before = timezone.now() - timedelta(seconds=pikku_settings.STALLED_RUN_AFTER_SECONDS)
    stalled = WorkflowRun.objects.stalled(before).order_by("updated_at")
    return list(stalled.values_list("pk", flat=True)[: pikku_settings.RECOVERY_BATCH])


def _resume(run_ids: list[Any]) -> int:
    count = 0
    for run_id in run_ids:
        if not backoff.allow(run_id):
            continue
        try:
            enqueue_orchestration(run_id)
        except WorkflowDispatchException:
            logger.warning("pikku_workflows: resume of stalled run %s failed", run_id)
            continue
        count += 1
    return count
