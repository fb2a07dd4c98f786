"""Queued steps from the pass's side: run one in place when the pass itself runs on a worker of
the step's cluster, or hand it to a worker of its cluster and park the run.

In place (docs/architecture.md §4): the pass claims the step, runs it in this process and goes
on, with no message and no new pass, while the queue message it is handling has budget left
(`IN_PLACE_MAX_SECONDS`, `IN_PLACE_MAX_STEPS`), the step's timeout can be enforced here and fits
in django-q2's time for the message, the worker is not shutting down, and recovery is not taking
work over (`in_place_hold`: its messages must not wait behind in-place passes). A queue that refuses a
message is transient: the step stays pending, the run running, and the pass is abandoned for
recovery to relay (docs/architecture.md §3); nothing is failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

from django.db import DatabaseError
from django.utils import timezone

from ...conf import pikku_settings
from ...control_flow import PassAbandoned, RunParked
from ...dispatch import (
    current_worker_message,
    enqueue_step,
    queue_in_engine_database,
    step_cluster,
    step_message,
)
from ...exceptions import InvalidTransition, StepSuperseded, WorkflowDispatchException
from ...models import WorkflowStep
from ...registry import StepFunctionDefinition
from ...status import StepStatus
from ..store.gather_transitions import create_dispatched_steps
from ..store.step_transitions import create_dispatched_step, create_step_in_run, move_step
from ..store.transitions import on_postgresql
from .attempts import record_kept, timeout_enforceable
from .replay_pass import ReplayPass


@dataclass
class HandledMessage:
    """The queue message this process is handling: its worker's cluster, when it began, when
    django-q2 stops it (monotonic; None: never), and how many steps it ran in place so far."""

    cluster: str
    began: float
    deadline: float | None
    in_place_steps: int = 0
    # An orchestrator pass's message: its pass may wait in place at a `wf.receive`.
    holds_receives: bool = False

    def budget_left(self) -> bool:
        elapsed = time.monotonic() - self.began
        return (
            self.in_place_steps < pikku_settings.IN_PLACE_MAX_STEPS
            and elapsed < pikku_settings.IN_PLACE_MAX_SECONDS
        )

    def fits(self, timeout_ms: int | None) -> bool:
        """Whether a step with this timeout can run here: enforced (a main thread), and over
        before django-q2's own time for the message runs out."""
        if timeout_ms is None:
            return True
        if not timeout_enforceable():
            return False
        return self.deadline is None or time.monotonic() + timeout_ms / 1000 < self.deadline


class InPlaceHold:
    """While recovery takes lapsed work over, the passes that were already running when it sent
    its messages run nothing more in place: those messages would otherwise wait for the whole
    in-place budget of every busy worker process. A message taken after the takeover began is not
    held (the takeover's messages were ahead of it in the queue), so after a restart's sweep the
    worker is back to running in place as soon as each process moved on. Bounded by `seconds`;
    in shared memory once `share_across_forks` ran (pikku_worker, before it forks), so its timer
    loop's hold reaches every worker process. Times are monotonic (one clock per host)."""

    def __init__(self) -> None:
        self._since: Any = ctypes.c_double(0.0)
        self._until: Any = ctypes.c_double(0.0)

    def share_across_forks(self) -> None:
        self._since = multiprocessing.Value("d", 0.0, lock=False)
        self._until = multiprocessing.Value("d", 0.0, lock=False)

    def hold(self, seconds: float) -> None:
        now = time.monotonic()
        self._since.value = now
        self._until.value = max(self._until.value, now + seconds)

    def holds(self, message: HandledMessage) -> bool:
        return message.began <= self._since.value and time.monotonic() < self._until.value


in_place_hold = InPlaceHold()
# A pass waiting at a `wf.receive` stops this long before django-q2's time for its message ends,
# leaving the rest of the pass (the reply, the park) time to finish.
RECEIVE_HOLD_MARGIN_SECONDS = 5.0
_message: ContextVar[HandledMessage | None] = ContextVar("pikku_handled_message", default=None)
_shutting_down = threading.Event()
_idle = threading.Event()  # no message is being handled in this process
_idle.set()


@contextlib.contextmanager
def handling_message(*, holds_receives: bool = False) -> Iterator[HandledMessage]:
    """While inside, this process handles one queue message (a task entry point): steps its
    passes reach may run in place, and with `holds_receives` (an orchestrator pass's message)
    the pass may wait in place at a `wf.receive` for its next update."""
    worker = current_worker_message()
    began = time.monotonic()
    deadline = None if worker.timeout_seconds is None else began + worker.timeout_seconds
    message = HandledMessage(worker.cluster, began, deadline, holds_receives=holds_receives)
    token = _message.set(message)
    _idle.clear()
    try:
        yield message
    finally:
        _message.reset(token)
        _idle.set()


def shut_down_gracefully(grace_seconds: float) -> None:
    """From now on nothing runs in place: the step running finishes, the next goes to the
    queue (a worker told to stop hands its work on rather than taking more). Returns once the
    message being handled ended, or after `grace_seconds`."""
    _shutting_down.set()
    _idle.wait(grace_seconds)


def runs_in_place(definition: StepFunctionDefinition, timeout_ms: int | None) -> bool:
    """Whether the pass runs this queued step in place (and counts it against its budget)."""
    message = _message.get()
    if (
        message is None
        or not pikku_settings.IN_PLACE
        or _shutting_down.is_set()
        or in_place_hold.holds(message)
        or step_cluster(definition.queue) != message.cluster
        or not message.budget_left()
        or not message.fits(timeout_ms)
    ):
        return False
    message.in_place_steps += 1
    return True


def receive_hold_seconds() -> float:
    """How long the pass may wait in place at a `wf.receive` with nothing to take (0: it parks
    the run at once): only a worker's orchestrator pass, while it may run work in place, never
    past `RECEIVE_HOLD_MAX_SECONDS` of its message nor close to django-q2's time for it."""
    message = _message.get()
    if (
        message is None
        or not message.holds_receives
        or not pikku_settings.IN_PLACE
        or _shutting_down.is_set()
        or in_place_hold.holds(message)
    ):
        return 0.0
    ends = message.began + pikku_settings.RECEIVE_HOLD_MAX_SECONDS
    if message.deadline is not None:
        ends = min(ends, message.deadline - RECEIVE_HOLD_MARGIN_SECONDS)
    return max(0.0, min(float(pikku_settings.RECEIVE_HOLD_SECONDS), ends - time.monotonic()))


def dispatch_new_step(
    rp: ReplayPass, step_key: str, definition: StepFunctionDefinition, fields: dict[str, Any]
) -> NoReturn:
    """Create a queued step and dispatch it, then park the run.

    When django-q2's queue is a table of this PostgreSQL database, the step, its message and the
    run lease's release are one statement (one commit instead of four); otherwise the step is
    created pending and `dispatch_step` enqueues it, then marks it scheduled.
    """
    record_kept(rp)
    if not (on_postgresql() and queue_in_engine_database()):
        dispatch_step(rp, _create_pending(rp, step_key, fields), definition)
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


def dispatch_step(
    rp: ReplayPass, step: WorkflowStep, definition: StepFunctionDefinition
) -> NoReturn:
    """Enqueue the step for a worker (`definition`: its step function, which names its queue),
    then mark it scheduled; the run waits for it."""
    record_kept(rp)
    _enqueue_and_mark(rp, step, definition)
    raise RunParked(step.step_key)


def _enqueue_and_mark(
    rp: ReplayPass, step: WorkflowStep, definition: StepFunctionDefinition
) -> None:
    try:
        enqueue_step(rp.run.pk, step.step_key, definition.queue)
    except WorkflowDispatchException as exc:
        raise PassAbandoned(exc) from exc
    if step.status == StepStatus.PENDING:
        # A worker may have claimed it already: then the guard refuses and that is fine.
        with contextlib.suppress(InvalidTransition, StepSuperseded):
            move_step(step, StepStatus.SCHEDULED, expected=[StepStatus.PENDING])


@dataclass(frozen=True)
class NewStep:
    """A queued step a gather's member reached for the first time, waiting to be dispatched with
    the others (`fields`: its row's columns)."""

    key: str
    definition: StepFunctionDefinition
    fields: dict[str, Any]


def dispatch_new_steps(rp: ReplayPass, new: list[NewStep]) -> None:
    """Create and dispatch a gather's new queued steps, then hand the run lease back: one
    statement when django-q2's queue is a table of this PostgreSQL database (the pass writes
    nothing after it); otherwise each is created pending, enqueued, then marked scheduled."""
    record_kept(rp)
    if not (on_postgresql() and queue_in_engine_database()):
        for entry in new:
            _enqueue_and_mark(rp, _create_pending(rp, entry.key, entry.fields), entry.definition)
        return
    # Each its own moment of creation: the admin lists steps by it.
    steps = [
        WorkflowStep(
            id=uuid.uuid4(),
            run_id=rp.run.pk,
            step_key=entry.key,
            created_at=timezone.now(),
            **entry.fields,
        )
        for entry in new
    ]
    try:
        messages = [step_message(rp.run.pk, entry.key, entry.definition.queue) for entry in new]
        rp.lease_released = create_dispatched_steps(rp.run.pk, rp.holder, steps, messages)
    except (WorkflowDispatchException, DatabaseError) as exc:
        # As for one step (dispatch_new_step): recorded without messages, relayed by recovery.
        for entry in new:
            _create_pending(rp, entry.key, entry.fields)
        refused = WorkflowDispatchException(f"{len(new)} steps were not dispatched: {exc}")
        raise PassAbandoned(refused) from exc
    rp.steps.update((step.step_key, step) for step in steps)


def _create_pending(rp: ReplayPass, step_key: str, fields: dict[str, Any]) -> WorkflowStep:
    step = create_step_in_run(rp.run.pk, rp.holder, step_key, status=StepStatus.PENDING, **fields)
    rp.steps[step_key] = step
    return step
