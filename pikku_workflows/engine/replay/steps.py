"""What `wf.do`, `wf.sleep` and `wf.suspend` do during a replay: return what is recorded, or
start the next attempt (in this process, on a worker, or as a child run) and record it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NoReturn

from django.db import transaction
from django.utils import timezone

from ... import events
from ...conf import pikku_settings
from ...control_flow import ReplayDiverged, RunParked
from ...durations import parse_duration
from ...exceptions import (
    InvalidInput,
    InvalidTransition,
    NonDeterministicReplay,
    StepFailed,
    StepFunctionNotDeployed,
    WorkflowSuspended,
)
from ...models import WorkflowStep
from ...registry import (
    ASYNC_NOT_ATOMIC,
    StepFunctionDefinition,
    parse_timeout,
    registry,
    validate_step_key,
)
from ...retry import RetryPolicy
from ...serialization import NotStorableJson, round_trip
from ...status import StepDispatch, StepKind, StepStatus
from ...step_keys import SUSPEND_PREFIX, handler_key, suspend_step_key
from ...validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH, checked_text
from ..store.rate_transitions import attempt_rate_keys
from ..store.step_transitions import move_step, note_attempt_end, retarget_unstarted_step
from . import children, queued
from .async_attempts import AsyncAttempt, call_async_user_code, is_async
from .atomic_steps import call_atomically
from .attempts import (
    call_user_code,
    claim_next_attempt,
    create_next_step,
    finish_in_pass,
    record_kept,
    run_still_ours,
    started_by_name,
    step_context,
    timeout_enforceable,
)
from .replay_pass import ReplayPass, lease_lapsed, observe_timer, seconds_until_due
from .suspension import suspend_in_pass


@dataclass(frozen=True)
class StepOptions:
    retries: int | None = None
    retry_delay: int | str | timedelta | None = None
    on_error: str | None = None
    timeout: int | str | timedelta | None = None
    # None: as the step function was registered.
    atomic: bool | None = None


@dataclass(frozen=True)
class StepCall:
    """One reach of a step in the body, resolved against the registry once: `definition` is
    the step function registered here under `function_name` (None: a callable, a child run, or
    a name this process lacks), so nothing later in the pass looks it up again."""

    key: str
    from_key: str | None
    kind: str
    function_name: str | None
    data: Any
    policy: RetryPolicy
    on_error: str | None = None
    timeout_ms: int | None = None
    func: Callable[..., Any] | None = None
    definition: StepFunctionDefinition | None = None
    atomic: bool = False
    # The gather the step is a member of (`wf.gather`, `wf.map`), by its key.
    gather_key: str | None = None


def drive_call(rp: ReplayPass, call: StepCall) -> Any:
    """Return the call's recorded result, or start its next attempt (in this process, on a
    worker, as a child run) and drive it; raises StepFailed once it is exhausted, RunParked while
    it must wait outside this pass. `wf.do` and the graph pass (a node instance) both use it."""
    step = rp.steps.get(call.key)
    if step is not None:
        _take_current_target(rp, step, call)
        check_same_step(step, call)
    elif call.kind == StepKind.FUNCTION and call.func is None:
        suspend_missing_function(rp, call)
    return _drive(rp, call, step)


def named_call(
    key: str, from_key: str | None, function_name: str, data: Any, policy: RetryPolicy
) -> StepCall:
    """The call of a step function or workflow by name (a graph node instance), resolved
    against this process's registry; `data` already storable."""
    kind, name, func, definition = _resolve_target(key, function_name, None)
    timeout_ms = definition.timeout_ms if definition else None
    return StepCall(key, from_key, kind, name, data, policy, None, timeout_ms, func, definition)


def leaves_the_pass(rp: ReplayPass, call: StepCall) -> bool:
    """Whether the call's attempts leave the pass's own code path: a queued step function, run
    in place or through the queue (decided without spending an in-place budget)."""
    if not _queued(call.definition):
        return False
    if rp.inline_caller:
        # An async step's timeout is its loop's to enforce, in any thread.
        return call.timeout_ms is not None and not (timeout_enforceable() or is_async(call.func))
    return True


def queue_new_step(rp: ReplayPass, call: StepCall) -> NoReturn:
    """Record the call's step pending and hand it to the queue, never in place, then park: the
    steps of a fan-out run in parallel on workers, and the pass keeps its run lease for the next
    (the single-statement dispatch of `drive_call` hands it back)."""
    assert call.definition is not None  # a queued step function: `leaves_the_pass` said so
    queued.dispatch_step(rp, _create_step(rp, call, StepStatus.PENDING), call.definition)


def unstarted(step: WorkflowStep) -> bool:
    """No attempt of the step ever ran: a step function's step still pending on its first
    attempt (RPC_NOT_FOUND left it so, or its queue message is still on its way)."""
    return (
        step.status == StepStatus.PENDING
        and step.attempt == 1
        and step.kind == StepKind.FUNCTION
        and step.child_run_id is None
    )


def _take_current_target(rp: ReplayPass, step: WorkflowStep, call: StepCall) -> None:
    """A step no attempt ran takes what the code asks for now: a mistyped function name fixed
    and deployed heals on resume (nothing ran, so nothing is non-deterministic), and a name
    deployed since as a workflow becomes a child step. A worker that claimed the step meanwhile
    wins; the replay then judges it as recorded."""
    if not unstarted(step) or same_step(step, call):
        return
    record_kept(rp)
    recorded = step.function_name
    fields = {key: value for key, value in step_row_fields(call).items() if key != "from_step_key"}
    if retarget_unstarted_step(step, **fields):
        events.announce_step_retargeted(rp.run.pk, step.step_key, recorded, call.function_name)


def resolve_call(
    rp: ReplayPass, key: str, target: Any, data: Any, options: StepOptions
) -> StepCall:
    """The call a `wf.do` reach makes, checked and keyed (its ordinal allocated)."""
    call = prepare_call(key, target, data, options)
    physical, from_key = rp.allocate_key(key)
    return replace(call, key=physical, from_key=from_key)


def prepare_call(key: str, target: Any, data: Any, options: StepOptions) -> StepCall:
    """The call of `target` under the logical `key`, checked (InvalidInput names what is wrong)
    but not keyed yet: what `wf.call` checks before anything runs."""
    validate_step_key(key)
    policy = RetryPolicy.resolve(
        options.retries, options.retry_delay, pikku_settings.DEFAULT_STEP_RETRIES
    )
    timeout_ms = parse_timeout(options.timeout) if options.timeout is not None else None
    kind, name, func, definition = _resolve_target(key, target, data)
    if options.timeout is not None and not (_queued(definition) or is_async(func)):
        raise InvalidInput(
            f"Step {key!r}: timeout is enforced only for queued or async step functions."
        )
    try:
        data = round_trip(data, name="data")
    except NotStorableJson as exc:
        raise InvalidInput(f"Step {key!r}: data is not storable JSON: {exc}") from exc
    if timeout_ms is None and definition is not None:
        timeout_ms = definition.timeout_ms
    if definition is not None and definition.governed:
        # An unknown limit or a key function failing on the data is raised here, before the
        # step is written (the claim of each attempt asks the same keys again).
        attempt_rate_keys(definition, data)
    atomic = _atomic(key, kind, definition, options.atomic)
    return StepCall(
        key, None, kind, name, data, policy, options.on_error, timeout_ms, func, definition, atomic
    )


def _atomic(
    key: str, kind: str, definition: StepFunctionDefinition | None, asked: bool | None
) -> bool:
    if asked is None:
        return definition is not None and definition.atomic
    if not isinstance(asked, bool):
        raise InvalidInput(f"Step {key!r}: atomic must be True or False.")
    if asked and is_async(definition.func if definition else None):
        raise InvalidInput(f"Step {key!r}: {ASYNC_NOT_ATOMIC}")
    if asked and kind != StepKind.FUNCTION:
        raise InvalidInput(
            f"Step {key!r}: atomic=True is for step functions (their writes commit with their "
            "result); a callable or a child run cannot be made atomic."
        )
    return asked


def _resolve_target(
    key: str, target: Any, data: Any
) -> tuple[str, str, Callable[..., Any] | None, StepFunctionDefinition | None]:
    """(kind, name, the function to call here or None, its registered step function or None)."""
    if callable(target):
        if data is not None:
            raise InvalidInput(f"Step {key!r}: a callable step takes no data; close over it.")
        return StepKind.CALLABLE, _callable_name(target), target, None
    if not isinstance(target, str):
        raise InvalidInput(f"Step {key!r}: target must be a step function name or a callable.")
    checked_text(target, f"Step {key!r}: the target", max_length=NAME_MAX_LENGTH)
    if registry.is_workflow(target):
        return StepKind.CHILD, target, None, None
    definition = registry.step_functions.get(target)
    if definition is None:
        return StepKind.FUNCTION, target, None, None
    return StepKind.FUNCTION, target, definition.func, definition


def _callable_name(func: Callable[..., Any]) -> str:
    name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    return name[:NAME_MAX_LENGTH]  # only for display: callables are matched by kind


def _queued(definition: StepFunctionDefinition | None) -> bool:
    return definition is not None and not definition.inline


def _placement(rp: ReplayPass, call: StepCall, step: WorkflowStep | None = None) -> str:
    """Where the step's next attempt runs (docs/architecture.md §4): in the pass (in-process
    step functions; every step of an inline run, except one whose timeout its caller cannot
    enforce), in place (a queued step's first attempt, reached by a pass on a worker of its
    cluster with budget left), or through the queue (everything else: its retries too)."""
    if not leaves_the_pass(rp, call):
        return StepDispatch.INLINE
    if rp.inline_caller or rp.batch is not None:
        # Its timeout cannot be enforced in the caller; a gather's member runs beside the others.
        return StepDispatch.QUEUED
    first = step is None or step.status == StepStatus.PENDING
    assert call.definition is not None  # a queued step function: `leaves_the_pass` said so
    if first and queued.runs_in_place(call.definition, call.timeout_ms):
        return StepDispatch.IN_PLACE
    return StepDispatch.QUEUED


def same_step(step: WorkflowStep, call: StepCall) -> bool:
    """Whether the call asks for what the step recorded: the same kind and function. Callables
    are compared by kind only: renaming a lambda must not break running runs."""
    return step.kind == call.kind and (
        call.kind == StepKind.CALLABLE or step.function_name == call.function_name
    )


def check_same_step(step: WorkflowStep, call: StepCall) -> None:
    """Stop the body (ReplayDiverged, which its `except Exception:` cannot swallow) when the
    call asks for something else than the step recorded: replay goes on under new code for as
    long as every recorded key asks for the same function."""
    if not same_step(step, call):
        recorded = step.function_name or step.kind
        raise ReplayDiverged(NonDeterministicReplay(call.key, recorded, call.function_name))


def _drive(rp: ReplayPass, call: StepCall, step: WorkflowStep | None) -> Any:
    """Loop until the step has a result, fails for good, or must wait outside this pass."""
    while True:
        if step is None:
            step = _first_attempt(rp, call)
        elif step.status == StepStatus.SUCCEEDED:
            rp.consume(step)
            return step.result
        elif step.status == StepStatus.FAILED and step.attempt >= step.attempt_limit:
            _run_on_error(rp, call, step)
            rp.consume(step)
            raise StepFailed(call.key, step.error or {})
        elif step.status in (StepStatus.FAILED, StepStatus.PENDING):
            # A retry's backoff, or the time a limit or rate gave a pending step, comes first.
            _wait_until_due(rp, step)
            step = _next_attempt(rp, call, step)
        elif step.status == StepStatus.RUNNING and lease_lapsed(step):
            step = _next_attempt(rp, call, step)
        elif step.status == StepStatus.WAITING and call.kind == StepKind.CHILD:
            step = children.settle_waiting_step(rp, step, call.policy)
        else:
            raise RunParked(call.key)


def _first_attempt(rp: ReplayPass, call: StepCall) -> WorkflowStep:
    if call.kind == StepKind.CHILD:
        return children.launch_next(rp, _create_step(rp, call, StepStatus.PENDING), call.policy)
    placement = _placement(rp, call)
    if placement == StepDispatch.QUEUED:
        assert call.definition is not None  # only a queued step function is placed there
        if rp.batch is not None:
            # A gather's member: dispatched with the others when the gather's round ends.
            rp.batch.append(call)
            raise RunParked(call.key)
        queued.dispatch_new_step(rp, call.key, call.definition, step_row_fields(call))
    if call.definition is not None and call.definition.governed:
        # Its limits and rate are asked by the claim of its attempt, as for every attempt.
        return _next_attempt(rp, call, _create_step(rp, call, StepStatus.PENDING))
    return run_in_pass(rp, call, placement)


def run_in_pass(rp: ReplayPass, call: StepCall, placement: str) -> WorkflowStep:
    """Create the step running under this pass and run its first attempt here (`placement`:
    in the pass, or in place on this worker)."""
    lease = pikku_settings.STEP_LEASE_SECONDS
    step = _create_step(rp, call, StepStatus.RUNNING, lease_seconds=lease, dispatch=placement)
    return _run_attempt(rp, call, step)


def _next_attempt(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> WorkflowStep:
    """Start the step's next attempt from pending, a due retry, or a lapsed lease. Checked
    before every attempt, not only the first: a rolling deploy can hand a retry (or a lapsed
    attempt) to a process without the function; no attempt is started then."""
    if call.kind == StepKind.FUNCTION and call.func is None:
        suspend_missing_function(rp, call)
    if call.kind == StepKind.CHILD:
        return children.launch_next(rp, step, call.policy)
    record_kept(rp)
    placement = _placement(rp, call, step)
    if placement == StepDispatch.QUEUED:
        # The worker's claim decides: the first attempt, a new one, or the lapse that ends it.
        assert call.definition is not None  # only a queued step function is placed there
        queued.dispatch_step(rp, step, call.definition)
    claim = claim_next_attempt(rp.run.pk, call.key, lease_holder=rp.holder, dispatch=placement)
    if claim.held:
        assert claim.step is not None
        rp.steps[call.key] = claim.step
        if claim.step.wake_at is None:
            raise RunParked(call.key)  # it waits for a slot: the one freed next dispatches it
        return claim.step  # it waits for its time (`_drive`): here, or parked on its timer
    if claim.step is None or not (claim.claimed or claim.expired):
        raise RunParked(call.key)  # not claimable now: its timer or recovery brings a pass back
    rp.steps[call.key] = claim.step
    if claim.expired:
        return claim.step  # its last attempt's lease lapsed: the step failed for good
    return _run_attempt(rp, call, claim.step)


def _run_attempt(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> WorkflowStep:
    assert call.func is not None
    args = (
        ()
        if step.kind == StepKind.CALLABLE
        else (step.data, step_context(step, started_by_name(rp.run)))
    )
    if is_async(call.func):
        if rp.async_attempts is not None:
            # A gather's round reached it: it runs with the round's other async attempts, after.
            rp.async_attempts.append(AsyncAttempt(step, call.func, args, call.policy))
            raise RunParked(call.key)
        outcome = call_async_user_code(rp.event_loop, step, call.func, args)
    elif step.atomic:
        # Its writes and its result commit together, so no result is kept for a later write.
        record_kept(rp)
        with run_still_ours():
            outcome = call_atomically(step, call.func, args)
    else:
        outcome = call_user_code(step, _in_savepoint(call.func), args)
    finish_in_pass(rp, step, outcome, call.policy)
    return step


def _in_savepoint(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run user code in a savepoint when the caller's transaction is open (an inline start inside
    `atomic()`): a database error in a step then fails its attempt, not the whole transaction,
    and the failed attempt's writes roll back with it."""

    def call(*args: Any) -> Any:
        if not transaction.get_connection().in_atomic_block:
            return func(*args)
        with transaction.atomic():
            return func(*args)

    return call


def _wait_until_due(rp: ReplayPass, step: WorkflowStep) -> None:
    """Return when the step's timer is due (by the database clock); park the run when it is not
    due and too far off for an inline caller to wait here."""
    remaining = seconds_until_due(step)
    if remaining <= 0:
        return
    if rp.inline_caller and remaining <= pikku_settings.INLINE_SLEEP_MAX_SECONDS:
        time.sleep(remaining)
        return
    raise RunParked(step.step_key)


def step_row_fields(call: StepCall) -> dict[str, Any]:
    return {
        "kind": call.kind,
        "function_name": call.function_name,
        "data": call.data,
        "retries": call.policy.retries,
        "attempt_limit": call.policy.attempt_limit,
        "retry_delay": call.policy.stored_delay,
        "timeout_ms": call.timeout_ms,
        "from_step_key": call.from_key,
        "atomic": call.atomic,
        "gather_key": call.gather_key,
    }


def _create_step(rp: ReplayPass, call: StepCall, status: str, **attempt: Any) -> WorkflowStep:
    """Create the step in the run (`attempt`: its first attempt's lease, timer or dispatch)."""
    step = create_next_step(rp, call.key, status=status, **step_row_fields(call), **attempt)
    rp.steps[call.key] = step
    return step


def on_error_call(call: StepCall, step: WorkflowStep) -> StepCall | None:
    """The `on_error` handler's call for the exhausted `step`, with the failed step's input and
    error (a refund can name the charge it refunds), or None without a handler."""
    if not call.on_error:
        return None
    definition = registry.step_functions.get(call.on_error)
    error = step.error or {}
    return StepCall(
        key=handler_key(call.key),
        from_key=call.key,
        kind=StepKind.FUNCTION,
        function_name=call.on_error,
        data={
            "data": step.data,
            "error": {key: error.get(key, "") for key in ("code", "message", "type")},
            "step_key": call.key,
            "attempt": step.attempt,
        },
        policy=RetryPolicy(0, None),
        func=definition.func if definition else None,
        definition=definition,
    )


def _run_on_error(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> None:
    """Run the `on_error` step function once, as its own durable step `<key>:onError`."""
    handler = on_error_call(call, step)
    if handler is None:
        return
    existing = rp.steps.get(handler.key)
    if existing is not None:
        check_same_step(existing, handler)
    elif handler.func is None:
        suspend_missing_function(rp, handler)
    # The original error is what the body sees; the handler's own failure stays recorded.
    with contextlib.suppress(StepFailed):
        _drive(rp, handler, existing)


def suspend_missing_function(rp: ReplayPass, call: StepCall) -> None:
    """No such step function here: record the step as pending (no attempt) and suspend the run,
    naming the registered functions the name is close to (a typo shows at once)."""
    missing = StepFunctionNotDeployed(
        call.function_name, call.key, registry.close_names(call.function_name or "")
    )
    events.announce_missing_function(rp.run.pk, call.key, call.function_name, missing.message)
    suspend_in_pass(
        rp,
        missing,
        step_key=call.key,
        step_fields=None if call.key in rp.steps else step_row_fields(call),
    )


def sleep_call(rp: ReplayPass, key: str, duration: int | str | timedelta) -> StepCall:
    """The call a `wf.sleep` reach makes, checked and keyed."""
    validate_step_key(key)
    duration_ms = parse_duration(duration)
    physical, from_key = rp.allocate_key(key)
    return StepCall(
        physical, from_key, StepKind.SLEEP, None, {"duration_ms": duration_ms}, RetryPolicy(0, None)
    )


def run_sleep(rp: ReplayPass, key: str, duration: int | str | timedelta) -> None:
    call = sleep_call(rp, key, duration)
    physical, duration_ms = call.key, call.data["duration_ms"]
    step = rp.steps.get(physical)
    if step is None:
        # The timer row is the arming: one write, so no crash can leave it half armed. An inline
        # caller waits a short one out here; if it dies meanwhile, the timer loop fires it.
        step = _create_step(rp, call, StepStatus.SCHEDULED, wake_in_ms=duration_ms)
        observe_timer(step, timedelta(milliseconds=duration_ms))
    else:
        check_same_step(step, call)
    _finish_sleep(rp, step)


def _finish_sleep(rp: ReplayPass, step: WorkflowStep) -> None:
    if step.status == StepStatus.SUCCEEDED:
        rp.consume(step)  # `wf.now()` after a sleep is when it ended
        return
    record_kept(rp)
    _wait_until_due(rp, step)  # parks the run unless the timer is (nearly) due
    try:
        move_step(step, StepStatus.SUCCEEDED, expected=[step.status], result=None, wake_at=None)
    except InvalidTransition:
        # The timer loop ended the same sleep meanwhile: that is the outcome we wanted.
        step.refresh_from_db(fields=["status"])
        if step.status != StepStatus.SUCCEEDED:
            raise
        ended = WorkflowStep.objects.with_attempt_end().filter(pk=step.pk)
        note_attempt_end(step, ended.values_list("ended_at", flat=True).first())
    rp.consume(step)


def suspend_key(rp: ReplayPass, reason: str) -> tuple[str, str | None]:
    """The key a `wf.suspend` reach records its step under, and the key reached before it."""
    limit = KEY_MAX_LENGTH - len(SUSPEND_PREFIX)
    checked_text(reason, "A suspend reason", max_length=limit)
    return rp.allocate_key(suspend_step_key(reason))


def run_suspend(rp: ReplayPass, reason: str) -> None:
    physical, from_key = suspend_key(rp, reason)
    step = rp.steps.get(physical)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        return
    suspend_in_pass(
        rp,
        WorkflowSuspended(reason),
        step_key=physical,
        step_fields={
            "kind": StepKind.SUSPEND,
            "from_step_key": from_key,
            "data": {"reason": reason},
        },
        step_result={"reason": reason, "suspended_at": timezone.now().isoformat()},
    )
