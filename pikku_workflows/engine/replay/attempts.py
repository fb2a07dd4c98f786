"""One attempt of a step function: the `StepContext` it is called with, claiming the attempt
(shared by the orchestrator pass and the step worker), calling user code under its timeout,
and recording the outcome, fenced by attempt.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import DataError, transaction
from django.utils import timezone

from ... import events
from ...control_flow import RunInterrupted, TimeLimitAlarm
from ...exceptions import (
    InvalidInput,
    InvalidTransition,
    RateLimited,
    StepLeaseExpired,
    StepResultNotSerializable,
    StepSuperseded,
    StepTimedOut,
)
from ...models import WorkflowRun, WorkflowStep
from ...observability.instruments import (
    count_lease_expired_after_commit,
    record_schedule_to_start_after_commit,
    seconds_between,
)
from ...observability.log_context import logging_for_attempt
from ...registry import StepFunctionDefinition, registry
from ...retry import RetryPolicy
from ...serialization import NotStorableJson, describe_error, round_trip
from ...status import StepDispatch, StepStatus
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.claims import lock_step_txn
from ..store.gather_transitions import record_member_outcome
from ..store.leases import heartbeat, request_rerun, step_lease_until
from ..store.limit_slots import (
    bounded_limits,
    holds_slots,
    release_slots,
    release_slots_txn,
    take_slots_txn,
    wait_for_slot_txn,
)
from ..store.rate_transitions import attempt_rate_keys, close_rate, hold_attempt_txn
from ..store.run_state import checked_state, merge_run_state
from ..store.step_transitions import (
    UnrecordedSuccess,
    create_step_in_run,
    end_lapsed_attempt_txn,
    move_step_txn,
    note_attempt_end,
    record_step_outcome,
)
from ..store.transitions import on_postgresql
from .replay_pass import ReplayPass, observe_timer

INVOCATION_NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001")


def invocation_id(run_id: Any, step_key: str) -> str:
    """Stable across attempts and replays: the idempotency key to hand to external systems."""
    return str(uuid.uuid5(INVOCATION_NAMESPACE, f"{run_id}:{step_key}"))


@dataclass(frozen=True)
class StepContext:
    """Passed to a step function as its second argument."""

    run_id: str
    step_id: str
    step_key: str
    invocation_id: str
    attempt: int
    from_invocation_id: str | None
    started_by: str | None
    # The step row this attempt runs as (what `branch` and `set_state` act on).
    _step: WorkflowStep | None = field(default=None, repr=False, compare=False)

    def branch(self, key: str) -> None:
        """Choose which branch of a graph node's `next` ({branch: targets}) fires after this
        attempt succeeds. Recorded with the result (the last call wins); a failed attempt's
        choice is dropped with it."""
        checked_text(key, "A branch", max_length=NAME_MAX_LENGTH)
        self._attempt_step().branch_taken = key

    def set_state(self, key: str, value: Any) -> None:
        """Set one key of the run's state now, merged into it (parallel nodes keep each other's
        keys); StepSuperseded once a newer attempt owns the step."""
        value = checked_state(key, value)
        if not merge_run_state(self.run_id, key, value, step=self._attempt_step()):
            raise StepSuperseded(self.step_key, self.attempt)

    def _attempt_step(self) -> WorkflowStep:
        if self._step is None:
            raise InvalidInput("This StepContext was not made by the engine for an attempt.")
        return self._step


def step_context(step: WorkflowStep, started_by: str | None) -> StepContext:
    return StepContext(
        run_id=str(step.run_id),
        step_id=str(step.pk),
        step_key=step.step_key,
        invocation_id=invocation_id(step.run_id, step.step_key),
        attempt=step.attempt,
        from_invocation_id=(
            invocation_id(step.run_id, step.from_step_key) if step.from_step_key else None
        ),
        started_by=started_by,
        _step=step,
    )


@dataclass(frozen=True)
class Recorded:
    """What recording an attempt's outcome did: `run`, the run leased to the recorder when it
    asked and the lease was free (else None); `wakes_run`, whether the run's pass has something
    to go on with: a result or the last attempt's failure, and for a gather's member only the
    outcome that settled the gather last."""

    run: WorkflowRun | None
    wakes_run: bool


@dataclass(frozen=True)
class Outcome:
    """What one attempt produced: its (round-tripped) result, or the error dict to record;
    `recorded` when the attempt's own transaction already wrote it (an atomic step function)."""

    succeeded: bool
    value: Any
    recorded: Recorded | None = None


@dataclass(frozen=True)
class Claim:
    """What a claim of a step's next attempt did. `step`: the step as the claim left it (None:
    no such step of a running run, or not of a run this pass drives). `claimed`: it now runs
    under our attempt. `expired`: its last attempt's lease had lapsed; the claim failed it.
    `held`: a limit or rate holds the attempt it would have started."""

    step: WorkflowStep | None
    claimed: bool = False
    expired: bool = False
    # A limit or rate holds the attempt: the step waits, pending or failed, until its `wake_at`.
    held: bool = False


# --- claiming ------------------------------------------------------------------------------


def claim_next_attempt(
    run_id: Any,
    step_key: str,
    *,
    lease_holder: str | None = None,
    dispatch: str = StepDispatch.QUEUED,
) -> Claim:
    """Claim a known step for this process, deciding on the locked row by the database clock:
    a pending or scheduled step starts running; a failed one whose retry is due, or a running
    one whose lease lapsed, gets a new attempt while attempts remain; a lapsed last attempt
    fails with STEP_LEASE_EXPIRED (a step that kills its process each time ends, loudly).

    The step worker claims without `lease_holder`; a pass passes its own, so the claim also
    proves the run is still driven by it. `dispatch`: how the claimed attempt runs.
    """
    with transaction.atomic():
        step = lock_step_txn(run_id, step_key, lease_holder)
        return Claim(None) if step is None else _claim_locked_txn(step, dispatch)


def _claim_locked_txn(step: Any, dispatch: str) -> Claim:
    status = step.status
    lapsed = status == StepStatus.RUNNING and step.lease_lapsed
    starts = status in (StepStatus.PENDING, StepStatus.SCHEDULED) or (
        step.attempt < step.attempt_limit and status == StepStatus.FAILED and step.retry_due
    )
    takes_over = lapsed and step.attempt < step.attempt_limit
    if starts or takes_over:
        refused = _admit_attempt_txn(step, takes_over=takes_over)
        if refused is not None:
            return refused
    fresh = {
        "lease_expires_at": step_lease_until(),
        "wake_at": None,
        "dispatch": dispatch,
        "not_before": None,
        "admission_hold": None,
    }
    if status in (StepStatus.PENDING, StepStatus.SCHEDULED):
        # Queued when last moved (made, or scheduled), or when its timer came due.
        queued_since = max(moment for moment in (step.updated_at, step.wake_at) if moment)
        move_step_txn(step, StepStatus.RUNNING, expected=[status], **fresh)
        if dispatch == StepDispatch.QUEUED:
            waited = seconds_between(queued_since, getattr(step, "attempt_started_at", None))
            record_schedule_to_start_after_commit(step.function_name, waited)
        return Claim(step, claimed=True)
    if lapsed:
        count_lease_expired_after_commit()
    if step.attempt >= step.attempt_limit:
        if lapsed:
            _fail_lease_expired_txn(step)
        return Claim(step, expired=lapsed)
    if lapsed or (status == StepStatus.FAILED and step.retry_due):
        lapsed_on = end_lapsed_attempt_txn(step, _lease_expired(step)) if lapsed else None
        # The new attempt fences the previous worker in the same write that grants our lease.
        renewed = {**fresh, "result": None, "error": None}
        move_step_txn(step, StepStatus.RUNNING, expected=[status], new_attempt=True, **renewed)
        if lapsed:
            events.announce_takeover(step.run_id, step.step_key, step.attempt, lapsed_on)
        return Claim(step, claimed=True)
    return Claim(step)


def _admit_attempt_txn(step: Any, *, takes_over: bool) -> Claim | None:
    """Ask the limits and rates of the step's function for the attempt about to start: None,
    it may start (holding a slot of each limit with `max_running`); else the claim's answer:
    held until its rate's time or a freed slot (a takeover of a lapsed attempt asks no rate,
    the rates were taken when that attempt started, and when a limit is full it is left for
    recovery to take over again)."""
    definition = registry.step_functions.get(step.function_name or "")
    if definition is None or not definition.governed:
        return None
    if not takes_over and _held_by_rates_txn(step, definition):
        return Claim(step, held=True)
    fresh = step.status in (StepStatus.PENDING, StepStatus.SCHEDULED)
    full = take_slots_txn(step, bounded_limits(definition), step.attempt + (0 if fresh else 1))
    if full is None:
        return None
    if takes_over:
        return Claim(step)
    wait_for_slot_txn(step, full)
    return Claim(step, held=True)


def _held_by_rates_txn(step: Any, definition: StepFunctionDefinition) -> bool:
    """Whether the attempt about to start must wait for a rate of its step function: until the
    time a rate already gave it, or the time the rates give it now."""
    if step.not_before is not None:
        if step.rate_wait <= timedelta(0):
            return False
        observe_timer(step, step.rate_wait)
        return True
    held = hold_attempt_txn(step, attempt_rate_keys(definition, step.data))
    if held is not None:
        observe_timer(step, timedelta(seconds=held.seconds_ahead))
    return held is not None


def _fail_lease_expired_txn(step: WorkflowStep) -> None:
    error = _lease_expired(step)
    move_step_txn(
        step, StepStatus.FAILED, expected=[StepStatus.RUNNING], error=error, lease_expires_at=None
    )


def _lease_expired(step: WorkflowStep) -> dict[str, Any]:
    error = StepLeaseExpired(step.step_key, step.attempt, step.attempt_limit)
    return describe_error(error, step_key=step.step_key, traceback=False)


# --- calling user code ---------------------------------------------------------------------


def call_user_code(step: WorkflowStep, func: Callable[..., Any], args: tuple[Any, ...]) -> Outcome:
    """Call user code outside any transaction, its lease renewed meanwhile and its attempt
    stopped at the step's timeout; the result comes back as its JSON round trip."""
    heartbeat.hold_step(step.pk, step.attempt)
    try:
        with (
            logging_for_attempt(step.run_id, step.step_key, step.attempt),
            time_limit(step.timeout_ms),
        ):
            value = func(*args)
    except TimeLimitAlarm:
        return timed_out(step)
    except Exception as exc:
        return Outcome(False, user_error(step, exc))
    except BaseException:
        free_limit_slots(step)  # no outcome will be recorded: nothing else frees them
        raise
    finally:
        heartbeat.drop_step(step.pk, step.attempt)
    return stored_outcome(step, value)


def stored_outcome(step: WorkflowStep, value: Any) -> Outcome:
    """The attempt's success as its JSON round trip, or its failure when it cannot be stored."""
    try:
        return Outcome(True, round_trip(value))
    except NotStorableJson as exc:
        return Outcome(False, unstorable_error(step, str(exc)))


def timed_out(step: WorkflowStep) -> Outcome:
    """The attempt stopped at the step's timeout: failed with TIMEOUT (no traceback)."""
    error = StepTimedOut(step.step_key, step.timeout_ms or 0)
    return Outcome(False, describe_error(error, step_key=step.step_key, traceback=False))


def takes_slots(step: WorkflowStep) -> bool:
    """Whether the step's attempts hold slots of a limit's `max_running` (freed as their
    outcome is recorded)."""
    definition = registry.step_functions.get(step.function_name or "")
    return definition is not None and holds_slots(definition)


def free_limit_slots(step: WorkflowStep) -> None:
    """The attempt ended and no outcome of it will be recorded (refused, or its code escaped
    with a signal): free its slots on their own."""
    if takes_slots(step):
        release_slots(step.pk, step.attempt)


def user_error(step: WorkflowStep, exc: BaseException) -> dict[str, Any]:
    """The error an attempt's exception records; an upstream's refusal (`pw.RateLimited`)
    keeps its `retry_after` and no traceback."""
    if isinstance(exc, RateLimited):
        refused = describe_error(exc, step_key=step.step_key, traceback=False)
        return {**refused, "retry_after_ms": exc.retry_after_ms}
    return describe_error(exc, step_key=step.step_key)


def timeout_enforceable() -> bool:
    """A timeout is enforced by SIGALRM, which only a process's main thread receives (a
    django-q2 worker runs every message there; a web request's thread is not one)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(milliseconds: int | None) -> Iterator[None]:
    """Raise TimeLimitAlarm into the block once `milliseconds` pass (main thread only).

    Nested inside an alarm already armed (django-q2's own task timeout, a test runner's): the
    earlier of the two fires first; the outer alarm is re-armed for what it had left after.
    """
    if milliseconds is None or not timeout_enforceable():
        yield
        return
    deadline = time.monotonic() + milliseconds / 1000
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer_deadline = time.monotonic() + outer_left if outer_left else None

    def on_alarm(signum: int, frame: Any) -> None:
        if time.monotonic() >= deadline - 0.005:
            raise TimeLimitAlarm
        # The outer alarm is due first: let it act, then wait on for ours.
        if callable(outer_handler):
            outer_handler(signum, frame)
        signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.001))

    signal.signal(signal.SIGALRM, on_alarm)
    first = min(milliseconds / 1000, outer_left) if outer_left else milliseconds / 1000
    signal.setitimer(signal.ITIMER_REAL, first)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_deadline is not None:
            signal.setitimer(signal.ITIMER_REAL, max(outer_deadline - time.monotonic(), 0.001))


# --- recording -----------------------------------------------------------------------------


def record_outcome(
    step: WorkflowStep, outcome: Outcome, policy: RetryPolicy, *, continue_as: str | None = None
) -> Recorded:
    """Write the attempt's result or error; raises StepSuperseded if a newer attempt owns it.

    A failure with attempts left arms the retry's timer (on the database clock). A result the
    database refuses (a DataError) fails the step at once: retrying cannot make it storable.
    With `continue_as` (a new lease holder id), an outcome the run must act on (a result, or the
    last attempt's error) also takes the run lease in the same write if it is free; the run
    comes back leased to `continue_as`.
    """
    if outcome.recorded is not None:
        return outcome.recorded
    if not takes_slots(step):
        return _record_outcome(step, outcome, policy, continue_as)
    attempt = step.attempt
    try:
        # The outcome and the freed slots (handed on to the waiting attempts) commit together.
        with transaction.atomic():
            recorded = _record_outcome(step, outcome, policy, continue_as)
            release_slots_txn(step.pk, attempt)
    except (StepSuperseded, InvalidTransition):
        free_limit_slots(step)
        raise
    return recorded


def _record_outcome(
    step: WorkflowStep, outcome: Outcome, policy: RetryPolicy, continue_as: str | None
) -> Recorded:
    if not outcome.succeeded:
        return _record_failure(step, outcome.value, policy, continue_as)
    try:
        with savepoint_if_in_transaction():
            return record_success(step, outcome.value, continue_as)
    except DataError as exc:
        return _record_failure(step, unstorable_error(step, str(exc)), policy, continue_as)


def record_success(step: WorkflowStep, result: Any, continue_as: str | None) -> Recorded:
    """Record the running attempt's result (a DataError when the database refuses it)."""
    return _record(step, StepStatus.SUCCEEDED, continue_as, result=result)


def _record(step: WorkflowStep, target: str, continue_as: str | None, **fields: Any) -> Recorded:
    """Record the outcome through the step's transition; a gather's member also learns whether
    it settled the gather (only then is the run woken)."""
    if step.gather_key is not None:
        run, settled = record_member_outcome(step, target, take_run_lease_for=continue_as, **fields)
        return Recorded(run, settled)
    run = record_step_outcome(step, target, take_run_lease_for=continue_as, **fields)
    return Recorded(run, target == StepStatus.SUCCEEDED or step.attempt >= step.attempt_limit)


def finish_in_pass(
    rp: ReplayPass, step: WorkflowStep, outcome: Outcome, policy: RetryPolicy
) -> None:
    """Record an attempt the pass ran itself. A success on PostgreSQL is kept for the pass's
    next write instead (`create_next_step`, `record_kept`): one commit per step, not two. A
    gather's member is written at once: whether it settled the gather is judged as it commits."""
    record_kept(rp)
    # An attempt holding slots is recorded at once: its slots go with its outcome, not with
    # whatever write the body makes next.
    keeps = not step.gather_key and not takes_slots(step)
    if outcome.succeeded and outcome.recorded is None and on_postgresql() and keeps:
        step.status, step.result = StepStatus.SUCCEEDED, outcome.value
        finished = timezone.now()
        note_attempt_end(step, finished)
        rp.unrecorded = UnrecordedSuccess(step, outcome.value, finished)
        return
    with run_still_ours():
        recorded = record_outcome(step, outcome, policy)
    if step.gather_key is not None and recorded.wakes_run:
        rp.gather_settled = True


def create_next_step(rp: ReplayPass, step_key: str, **fields: Any) -> WorkflowStep:
    """Create the pass's next step in the run; the success kept for this write is recorded in
    the same statement."""
    kept, rp.unrecorded = rp.unrecorded, None
    if kept is None:
        return create_step_in_run(rp.run.pk, rp.holder, step_key, **fields)
    try:
        with run_still_ours(), savepoint_if_in_transaction():
            return create_step_in_run(rp.run.pk, rp.holder, step_key, after=kept, **fields)
    except DataError:
        # The kept result, or the new step's values, refused: write them one at a time.
        rp.unrecorded = kept
        record_kept(rp)
        return create_step_in_run(rp.run.pk, rp.holder, step_key, **fields)


def record_kept(rp: ReplayPass) -> None:
    """Write the success kept for the pass's next write now: before any other write, and before
    the pass ends. If the database refuses the result, the step fails (unstorable) and the body,
    which went on with it, is replayed in one more pass."""
    kept, rp.unrecorded = rp.unrecorded, None
    if kept is None:
        return
    with run_still_ours():
        record_outcome(kept.step, Outcome(True, kept.result), RetryPolicy(0, None))
    if kept.step.status != StepStatus.SUCCEEDED:
        request_rerun(rp.run.pk)
        raise RunInterrupted(f"step {kept.step.step_key!r} could not be recorded as it ran")


@contextlib.contextmanager
def run_still_ours() -> Iterator[None]:
    """A newer attempt owning a step this pass ran means the run is no longer the pass's to
    drive (its lease lapsed meanwhile): the pass ends quietly, the newer attempt counts."""
    try:
        yield
    except StepSuperseded as exc:
        raise RunInterrupted(str(exc)) from exc


def _record_failure(
    step: WorkflowStep, error: dict[str, Any], policy: RetryPolicy, continue_as: str | None
) -> Recorded:
    if error.get("code") == RateLimited.code:
        return _record_rate_limited(step, error, policy)
    limit = step.attempt if error.get("code") == StepResultNotSerializable.code else None
    exhausted = step.attempt >= (limit or step.attempt_limit)
    wake_in_ms = None if exhausted else policy.backoff_ms(step.attempt)
    recorded = _record(
        step,
        StepStatus.FAILED,
        continue_as if exhausted else None,
        error=error,
        attempt_limit=limit,
        wake_in_ms=wake_in_ms,
    )
    if wake_in_ms is not None:
        observe_timer(step, timedelta(milliseconds=wake_in_ms))
    return recorded


def _record_rate_limited(
    step: WorkflowStep, error: dict[str, Any], policy: RetryPolicy
) -> Recorded:
    """An upstream refused for now (`pw.RateLimited`): the attempt is recorded failed without
    spending a retry (its step gains one attempt), and, in the same transaction, the step's
    limit keys close for everyone until `retry_after` has passed (without one, the attempt
    waits out its backoff and the rates space the next)."""
    retry_after_ms = error.get("retry_after_ms")
    wake_in_ms = policy.backoff_ms(step.attempt) if retry_after_ms is None else retry_after_ms
    definition = registry.step_functions.get(step.function_name or "")
    with transaction.atomic():
        if definition is not None and retry_after_ms is not None:
            for limit, key in attempt_rate_keys(definition, step.data):
                close_rate(limit, key, retry_after_ms / 1000)
        recorded = _record(
            step,
            StepStatus.FAILED,
            None,
            error=error,
            attempt_limit=step.attempt_limit + 1,
            wake_in_ms=wake_in_ms,
        )
    observe_timer(step, timedelta(milliseconds=wake_in_ms))
    return recorded


def unstorable_error(step: WorkflowStep, reason: str) -> dict[str, Any]:
    error = StepResultNotSerializable(step.step_key, reason)
    return describe_error(error, step_key=step.step_key, traceback=False)


@contextlib.contextmanager
def savepoint_if_in_transaction() -> Iterator[None]:
    # Inside the caller's transaction (an inline start within atomic()) a refused write must
    # not doom that transaction: the failure that follows has to be written in it.
    if transaction.get_connection().in_atomic_block:
        with transaction.atomic():
            yield
    else:
        yield


def started_by_name(run: WorkflowRun) -> str | None:
    return run.started_by.get_username() if run.started_by else None
