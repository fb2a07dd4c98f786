"""Firing due timers: sleeps end, retry backoffs end; the work they wait for is dispatched."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import close_old_connections

from ..conf import pikku_settings
from ..dispatch import enqueue_orchestration, enqueue_step
from ..exceptions import WorkflowDispatchException
from ..registry import registry
from .claims import claim_due_timers

logger = logging.getLogger(__name__)


def fire_due_timers(limit: int | None = None) -> int:
    """One tick of the timer loop; returns how many timers fired."""
    due = claim_due_timers(limit or pikku_settings.RECOVERY_BATCH)
    for step in due:
        try:
            dispatch_woken(step.run_id, step.step_key, step.function_name)
        except WorkflowDispatchException:
            # The row says what is due; recovery relays it once the queue is back.
            logger.warning("pikku_workflows: woken step %s not dispatched", step.step_key)
    return len(due)


def dispatch_woken(run_id: Any, step_key: str, function_name: str | None) -> None:
    """A queued step function goes to a step worker; anything else resumes the run's pass."""
    definition = registry.step_functions.get(function_name or "")
    if definition is not None and not definition.inline:
        enqueue_step(run_id, step_key, definition.queue)
    else:
        enqueue_orchestration(run_id)


def run_timer_loop(stop: threading.Event) -> None:
    """Fire due timers every TIMER_POLL_SECONDS and run recovery every RECOVERY_INTERVAL_SECONDS
    until `stop` is set. Errors are logged and the loop goes on (the database may come back)."""
    from .recovery import recover

    next_recovery = 0.0
    while not stop.is_set():
        try:
            fired = fire_due_timers()
            if time.monotonic() >= next_recovery:
                counts = recover()
                next_recovery = time.monotonic() + pikku_settings.RECOVERY_INTERVAL_SECONDS
                if any(counts.values()):
                    logger.info("pikku_workflows: recovery %s", counts)
        except Exception:
            logger.exception("pikku_workflows: timer loop tick failed")
            close_old_connections()
            fired = 0
        if not fired:
            stop.wait(pikku_settings.TIMER_POLL_SECONDS)
