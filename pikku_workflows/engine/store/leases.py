"""Leases, on the database clock: the run lease (who may drive a run's orchestrator pass) and
step leases (who runs a step's attempt), and the heartbeat that renews those this process holds.

Taking the run lease is one conditional UPDATE that never waits; a pass that finds it held asks
the holder for one more pass (`rerun_requested`) instead of queueing behind it. Every expiry is
computed by the database (`lease_until`) and judged against its clock in the guarded write.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import Q

from ...conf import pikku_settings
from ...models import WorkflowRun, WorkflowSlot, WorkflowStep
from ...outages import outages
from ...querysets import DatabaseNow, database_in
from ...status import RunStatus, StepStatus
from .run_list_fields import list_field_values


def new_lease_holder() -> str:
    return uuid.uuid4().hex


def run_lease_until() -> Any:
    """When a run lease taken now expires, on the database clock."""
    return database_in(pikku_settings.RUN_LEASE_SECONDS)


def step_lease_until() -> Any:
    """When a step lease taken now expires, on the database clock."""
    return database_in(pikku_settings.STEP_LEASE_SECONDS)


def acquire_run_lease(run_id: Any, holder: str) -> bool:
    """Take the lease of a running run if it is free or lapsed."""
    runs = WorkflowRun.objects.running().filter(pk=run_id).lease_free()
    return bool(
        runs.update(
            lease_holder=holder,
            lease_expires_at=run_lease_until(),
            rerun_requested=False,
            updated_at=DatabaseNow(),
        )
    )


def request_rerun(run_id: Any) -> bool:
    """Ask the live holder of the run lease for one more pass; False if nobody holds it."""
    held = WorkflowRun.objects.running().filter(
        pk=run_id, lease_holder__isnull=False, lease_expires_at__gte=DatabaseNow()
    )
    return bool(held.update(rerun_requested=True))


def release_run_lease(run_id: Any, holder: str) -> bool:
    """Release the lease unless another pass was requested meanwhile.

    Returns True when released (the run's list fields recomputed in the same write, as the pass
    leaves it). False means a rerun is due: the flag is cleared here and the
    caller (still the holder) runs another pass. The release and the check are one UPDATE, so
    a request arriving at any moment is either seen here or finds the lease free.
    """
    released = WorkflowRun.objects.filter(
        pk=run_id, lease_holder=holder, rerun_requested=False
    ).update(lease_holder=None, lease_expires_at=None, **list_field_values())
    if released:
        return True
    # Held by us with a rerun pending (or lost to another holder: then there is nothing to do).
    return not WorkflowRun.objects.filter(pk=run_id, lease_holder=holder).update(
        rerun_requested=False,
        lease_expires_at=run_lease_until(),
    )


def _held(steps: list[tuple[Any, int]]) -> Q:
    # Fenced by attempt: a superseded attempt can neither renew nor release the new owner's lease.
    held = Q(pk__in=[])
    for step_id, attempt in steps:
        held |= Q(pk=step_id, attempt=attempt)
    return held & Q(status=StepStatus.RUNNING, lease_expires_at__isnull=False)


def abandon_run_lease(run_id: Any, holder: str) -> None:
    """Give the lease up unconditionally (the pass ended by an exception)."""
    WorkflowRun.objects.filter(pk=run_id, lease_holder=holder).update(
        lease_holder=None, lease_expires_at=None
    )


def renew_leases(run_ids: list[Any], holders: list[str], steps: list[tuple[Any, int]]) -> None:
    """Push out the leases this process holds: the runs it orchestrates and the steps it runs."""
    if run_ids:
        WorkflowRun.objects.filter(
            pk__in=run_ids, lease_holder__in=holders, status=RunStatus.RUNNING
        ).update(lease_expires_at=run_lease_until())
    if steps:
        WorkflowStep.objects.filter(_held(steps)).update(lease_expires_at=step_lease_until())
        # The limits' slots these attempts hold (`max_running`) live as long as their leases.
        WorkflowSlot.objects.filter(_slots_of(steps)).update(lease_expires_at=step_lease_until())


def release_step_leases(steps: list[tuple[Any, int]]) -> int:
    """Let the leases of steps this process gives up lapse now, so recovery re-claims at once
    (and the timer loop frees the limits' slots they held)."""
    if not steps:
        return 0
    WorkflowSlot.objects.filter(_slots_of(steps)).update(lease_expires_at=DatabaseNow())
    return WorkflowStep.objects.filter(_held(steps)).update(lease_expires_at=DatabaseNow())


def _slots_of(steps: list[tuple[Any, int]]) -> Q:
    held = Q(pk__in=[])
    for step_id, attempt in steps:
        held |= Q(step_id=step_id, attempt=attempt)
    return held


class Heartbeat:
    """One thread per process renewing every lease it holds, every third of the shortest lease."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[Any, str] = {}
        self._steps: dict[tuple[Any, int], int] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        # Held across a renewal's statement, so that handing steps back can wait for one in
        # flight: a renewal committing after the release would push the lease out again.
        self._renewing = threading.Lock()
        self._handing_back = False
        # Told +1 / -1 as attempts start and stop being held (pikku_worker counts steps in flight).
        self.count_steps: Callable[[int], None] | None = None

    def hold_run(self, run_id: Any, holder: str) -> None:
        with self._lock:
            self._runs[run_id] = holder
            self._ensure_thread()

    def drop_run(self, run_id: Any) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def hold_step(self, step_id: Any, attempt: int) -> None:
        with self._lock:
            key = (step_id, attempt)
            count = self._steps.get(key, 0) + 1
            self._steps[key] = count
            self._ensure_thread()
        if count == 1 and self.count_steps is not None:
            self.count_steps(1)

    def drop_step(self, step_id: Any, attempt: int) -> None:
        with self._lock:
            key = (step_id, attempt)
            count = self._steps.get(key, 0) - 1
            if count > 0:
                self._steps[key] = count
            dropped = count == 0 and self._steps.pop(key, None) is not None
        if dropped and self.count_steps is not None:
            self.count_steps(-1)

    def hand_back_steps(self) -> list[tuple[Any, int]]:
        """The steps this process holds, renewed no more from now on (once a renewal in flight
        has committed), so that a release of their leases that follows stays released."""
        with self._renewing, self._lock:
            self._handing_back = True
            return list(self._steps)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="pikku-heartbeat", daemon=True)
            self._thread.start()

    def _interval(self) -> float:
        shortest = min(pikku_settings.RUN_LEASE_SECONDS, pikku_settings.STEP_LEASE_SECONDS)
        return max(shortest / 3, 0.05)

    def _loop(self) -> None:
        try:
            while True:
                self._wake.wait(self._interval())
                with self._renewing:
                    with self._lock:
                        runs = dict(self._runs)
                        steps = [] if self._handing_back else list(self._steps)
                        if not runs and not steps:
                            self._thread = None
                            return
                    try:
                        renew_leases(list(runs), list(runs.values()), steps)
                    except Exception as exc:
                        outages.failed("renewing leases", exc)
                        close_old_connections()
        finally:
            connection.close()


heartbeat = Heartbeat()
