"""What `wf.do`, `wf.sleep` and `wf.suspend` do during a replay: return what is recorded, or
start the next attempt (in this process, on a worker, or as a child run) and record it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..conf import pikku_settings
from ..durations import parse_duration
from ..exceptions import (
    InvalidInput,
    InvalidTransition,
    NonDeterministicReplay,
    RunParked,
    StepFailed,
)
from ..models import WorkflowStep
from ..registry import registry, validate_step_key
from ..retry import RetryPolicy
from ..serialization import NotStorableJson, round_trip
from ..status import StepStatus
from . import children, execution
from .replay import ReplayPass
from .suspension import suspend_in_pass
from .transitions import create_step_in_run, move_step

KIND_FUNCTION = "function"
KIND_CALLABLE = "callable"
KIND_CHILD = "child"
KIND_SLEEP = "sleep"
KIND_SUSPEND = "suspend"


@dataclass(frozen=True)
class StepOptions:
    retries: int | None = None
    retry_delay: int | str | None = None
    on_error: str | None = None
    timeout: int | str | None = None


@dataclass(frozen=True)
class StepCall:
    """One reach of a step in the body, resolved against the registry."""

    key: str
    from_key: str | None
    kind: str
    function_name: str | None
    data: Any
    policy: RetryPolicy
    on_error: str | None
    timeout_ms: int | None
    func: Callable[..., Any] | None


def run_step(rp: ReplayPass, key: str, target: Any, data: Any, options: StepOptions) -> Any:
    call = _resolve_call(rp, key, target, data, options)
    step = rp.steps.get(call.key)
    if step is not None:
        _adopt_deployed_workflow(step, call)
        _check_same_step(step, call)
    elif call.kind == KIND_FUNCTION and call.func is None:
        suspend_missing_function(rp, call)
    return _drive(rp, call, step)


def _adopt_deployed_workflow(step: WorkflowStep, call: StepCall) -> None:
    """A name that was unknown when the step was recorded (RPC_NOT_FOUND: pending, no attempt)
    may since have been deployed as a workflow: the step becomes a child step, not a conflict."""
    if (
        step.status == StepStatus.PENDING
        and step.kind == KIND_FUNCTION
        and call.kind == KIND_CHILD
        and step.function_name == call.function_name
    ):
        pending = WorkflowStep.objects.filter(
            pk=step.pk, status=StepStatus.PENDING, attempt=step.attempt
        )
        if pending.update(kind=KIND_CHILD):
            step.kind = KIND_CHILD


def _resolve_call(
    rp: ReplayPass, key: str, target: Any, data: Any, options: StepOptions
) -> StepCall:
    validate_step_key(key)
    policy = RetryPolicy.resolve(
        options.retries, options.retry_delay, pikku_settings.DEFAULT_STEP_RETRIES
    )
    timeout_ms = parse_duration(options.timeout) if options.timeout is not None else None
    func: Callable[..., Any] | None
    if callable(target):
        if data is not None:
            raise InvalidInput(f"Step {key!r}: a callable step takes no data; close over it.")
        kind, name, func = KIND_CALLABLE, _callable_name(target), target
    elif isinstance(target, str) and registry.is_workflow(target):
        kind, name, func = KIND_CHILD, target, None
    elif isinstance(target, str):
        definition = registry.step_functions.get(target)
        kind, name = KIND_FUNCTION, target
        func = definition.func if definition else None
        if definition and definition.timeout_ms is not None and timeout_ms is None:
            timeout_ms = definition.timeout_ms
    else:
        raise InvalidInput(f"Step {key!r}: target must be a step function name or a callable.")
    if options.timeout is not None and not _runs_on_worker(rp, kind, name):
        raise InvalidInput(f"Step {key!r}: timeout is enforced only for queued step functions.")
    try:
        data = round_trip(data)
    except NotStorableJson as exc:
        raise InvalidInput(f"Step {key!r}: data is not storable JSON: {exc}") from exc
    physical, from_key = rp.allocate_key(key)
    return StepCall(
        physical, from_key, kind, name, data, policy, options.on_error, timeout_ms, func
    )


def _callable_name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _runs_on_worker(rp: ReplayPass, kind: str, name: str | None) -> bool:
    if kind != KIND_FUNCTION or rp.inline_caller or name is None:
        return False
    definition = registry.step_functions.get(name)
    return definition is not None and not definition.inline


def _check_same_step(step: WorkflowStep, call: StepCall) -> None:
    # Callables are compared by kind only: renaming a lambda must not break running runs.
    same = step.kind == call.kind and (
        call.kind == KIND_CALLABLE or step.function_name == call.function_name
    )
    if not same:
        raise NonDeterministicReplay(call.key, step.function_name or step.kind, call.function_name)


def _drive(rp: ReplayPass, call: StepCall, step: WorkflowStep | None) -> Any:
    """Loop until the step has a result, fails for good, or must wait outside this pass."""
    while True:
        if step is None:
            step = _first_attempt(rp, call)
        elif step.status == StepStatus.SUCCEEDED:
            return step.result
        elif step.status == StepStatus.FAILED and step.attempt >= step.attempt_limit:
            _compensate(rp, call, step)
            raise StepFailed(call.key, step.error or {})
        elif step.status == StepStatus.FAILED:
            _wait_for_retry(rp, step)
            _require_function(rp, call)
            step = _next_attempt(rp, call, step, StepStatus.FAILED)
        elif step.status == StepStatus.RUNNING and _lease_lapsed(step):
            _require_function(rp, call)
            step = _next_attempt(rp, call, step, StepStatus.RUNNING)
        elif step.status == StepStatus.PENDING:
            _require_function(rp, call)
            step = _start_pending(rp, call, step)
        elif step.status == StepStatus.WAITING and call.kind == KIND_CHILD:
            step = children.settle_waiting_step(rp, step, call.policy)
        else:
            raise RunParked(call.key)


def _require_function(rp: ReplayPass, call: StepCall) -> None:
    # Checked before every attempt, not only the first: a rolling deploy can hand a retry (or a
    # lapsed attempt) to a process without the function. No attempt is started then.
    if call.kind == KIND_FUNCTION and call.func is None:
        suspend_missing_function(rp, call)


def _lease_lapsed(step: WorkflowStep) -> bool:
    return step.lease_expires_at is not None and step.lease_expires_at < timezone.now()


def _step_row_fields(call: StepCall) -> dict[str, Any]:
    return {
        "kind": call.kind,
        "function_name": call.function_name,
        "data": call.data,
        "retries": call.policy.retries,
        "attempt_limit": call.policy.attempt_limit,
        "retry_delay": call.policy.stored_delay,
        "timeout_ms": call.timeout_ms,
        "from_step_key": call.from_key,
    }


def _create_step(rp: ReplayPass, call: StepCall, status: str, **fields: Any) -> WorkflowStep:
    step = create_step_in_run(
        rp.run.pk, rp.holder, call.key, status=status, **_step_row_fields(call), **fields
    )
    rp.steps[call.key] = step
    return step


def _first_attempt(rp: ReplayPass, call: StepCall) -> WorkflowStep:
    if call.kind == KIND_CHILD:
        return children.start_child(rp, _create_step(rp, call, StepStatus.PENDING), call.policy)
    if _runs_on_worker(rp, call.kind, call.function_name):
        return execution.dispatch_new_step(rp, call.key, _step_row_fields(call))
    step = _create_step(rp, call, StepStatus.RUNNING, lease_expires_at=execution.step_lease_until())
    return _run_attempt(rp, call, step)


def _start_pending(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> WorkflowStep:
    if call.kind == KIND_CHILD:
        return children.start_child(rp, step, call.policy)
    if _runs_on_worker(rp, call.kind, call.function_name):
        return execution.dispatch_step(rp, step)
    execution.claim_in_pass(rp, step, StepStatus.PENDING, new_attempt=False)
    return _run_attempt(rp, call, step)


def _run_attempt(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> WorkflowStep:
    return execution.run_attempt_in_pass(rp, step, _in_savepoint(call.func), call.policy)


def _in_savepoint(func: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """Run user code in a savepoint when the caller's transaction is open (an inline start inside
    `atomic()`): a database error in a step then fails its attempt, not the whole transaction,
    and the failed attempt's writes roll back with it."""
    if func is None:
        return None

    def call(*args: Any) -> Any:
        if not transaction.get_connection().in_atomic_block:
            return func(*args)
        with transaction.atomic():
            return func(*args)

    return call


def _next_attempt(rp: ReplayPass, call: StepCall, step: WorkflowStep, source: str) -> WorkflowStep:
    if call.kind == KIND_CHILD:
        return children.retry_child(rp, step, call.policy)
    if _runs_on_worker(rp, call.kind, call.function_name):
        # The worker's claim turns the failed or lapsed attempt into a new one.
        return execution.dispatch_step(rp, step)
    execution.claim_in_pass(rp, step, source, new_attempt=True)
    return _run_attempt(rp, call, step)


def _wait_for_retry(rp: ReplayPass, step: WorkflowStep) -> None:
    """Return when the retry is due; park the run when it is not due and too far to wait here."""
    if step.wake_at is None:
        return
    remaining = (step.wake_at - timezone.now()).total_seconds()
    if remaining <= 0:
        return
    if rp.inline_caller and remaining <= pikku_settings.INLINE_SLEEP_MAX_SECONDS:
        time.sleep(remaining)
        return
    raise RunParked(step.step_key)


def _compensate(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> None:
    """Run the `on_error` step function once, as its own durable step `<key>:onError`."""
    if not call.on_error:
        return
    definition = registry.step_functions.get(call.on_error)
    handler = StepCall(
        key=f"{call.key}:onError",
        from_key=call.key,
        kind=KIND_FUNCTION,
        function_name=call.on_error,
        data={"error": {"message": (step.error or {}).get("message", "")}},
        policy=RetryPolicy(0, None),
        on_error=None,
        timeout_ms=None,
        func=definition.func if definition else None,
    )
    existing = rp.steps.get(handler.key)
    if existing is not None:
        _check_same_step(existing, handler)
    elif handler.func is None:
        suspend_missing_function(rp, handler)
    # The original error is what the body sees; the handler's own failure stays recorded.
    with contextlib.suppress(StepFailed):
        _drive(rp, handler, existing)


def suspend_missing_function(rp: ReplayPass, call: StepCall) -> None:
    """No such step function here: record the step as pending (no attempt) and suspend the run."""
    suspend_in_pass(
        rp,
        f"Step function {call.function_name!r} is not registered (step {call.key!r}); "
        "deploy it and resume the run.",
        code="RPC_NOT_FOUND",
        step_key=call.key,
        step_fields=None if call.key in rp.steps else _step_row_fields(call),
    )


def run_sleep(rp: ReplayPass, key: str, duration: int | str) -> None:
    validate_step_key(key)
    duration_ms = parse_duration(duration)
    physical, from_key = rp.allocate_key(key)
    call = StepCall(
        physical,
        from_key,
        KIND_SLEEP,
        None,
        {"duration_ms": duration_ms},
        RetryPolicy(0, None),
        None,
        None,
        None,
    )
    step = rp.steps.get(physical)
    if step is not None:
        _check_same_step(step, call)
    elif rp.inline_caller and duration_ms <= pikku_settings.INLINE_SLEEP_MAX_SECONDS * 1000:
        step = _create_step(rp, call, StepStatus.RUNNING)
        time.sleep(duration_ms / 1000)
    else:
        # The timer row is the arming: one write, so no crash can leave it half armed.
        wake_at = timezone.now() + timedelta(milliseconds=duration_ms)
        step = _create_step(rp, call, StepStatus.SCHEDULED, wake_at=wake_at)
    _finish_sleep(rp, step)


def _finish_sleep(rp: ReplayPass, step: WorkflowStep) -> None:
    if step.status == StepStatus.SUCCEEDED:
        return
    if step.status == StepStatus.SCHEDULED and step.wake_at is not None:
        _wait_for_retry(rp, step)  # parks the run unless the timer is (nearly) due
    try:
        move_step(step, StepStatus.SUCCEEDED, expected=[step.status], result=None, wake_at=None)
    except InvalidTransition:
        # The timer loop ended the same sleep meanwhile: that is the outcome we wanted.
        step.refresh_from_db(fields=["status"])
        if step.status != StepStatus.SUCCEEDED:
            raise


def run_suspend(rp: ReplayPass, reason: str) -> None:
    if not isinstance(reason, str) or not reason:
        raise InvalidInput(f"A suspend reason must be a non-empty string, not {reason!r}.")
    physical, from_key = rp.allocate_key(f"__suspend:{reason}")
    step = rp.steps.get(physical)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        return
    suspend_in_pass(
        rp,
        reason,
        code="WORKFLOW_SUSPENDED",
        step_key=physical,
        step_fields={"kind": KIND_SUSPEND, "from_step_key": from_key, "data": {"reason": reason}},
        step_result={"reason": reason, "suspended_at": timezone.now().isoformat()},
    )
