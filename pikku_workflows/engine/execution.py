"""Running one attempt of a step function and recording its outcome, fenced by attempt.

Shared by the orchestrator pass (in-process steps) and the step worker (queued steps).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ..conf import pikku_settings
from ..dispatch import (
    enqueue_orchestration,
    enqueue_step,
    queue_in_engine_database,
    serves_orchestrator_cluster,
    step_message,
)
from ..exceptions import (
    DispatchFailed,
    InvalidTransition,
    RunInterrupted,
    RunParked,
    StepResultNotSerializable,
    StepSuperseded,
    WorkflowDispatchException,
)
from ..models import WorkflowRun, WorkflowStep
from ..registry import registry
from ..retry import RetryPolicy
from ..serialization import NotStorableJson, describe_error, round_trip
from ..status import RunStatus, StepStatus
from .claims import claim_fresh_step, claim_step
from .context import StepContext, invocation_id
from .leases import heartbeat, new_lease_holder
from .replay import LeasedRun, ReplayPass
from .transitions import (
    create_dispatched_step,
    create_step_in_run,
    fast_path_available,
    lock_running_run_txn,
    move_run,
    move_step,
    move_step_taking_run_lease,
    move_step_txn,
)

logger = logging.getLogger(__name__)


def step_lease_until() -> datetime:
    return timezone.now() + timedelta(seconds=pikku_settings.STEP_LEASE_SECONDS)


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
    )


def claim_in_pass(rp: ReplayPass, step: WorkflowStep, source: str, *, new_attempt: bool) -> None:
    """Move an in-process step to running (a new attempt from failed or a lapsed lease)."""
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        moved = move_step_txn(
            step,
            StepStatus.RUNNING,
            expected=[source],
            new_attempt=new_attempt,
            lease_expires_at=step_lease_until(),
            wake_at=None,
            result=None,
            error=None,
        )
    if not moved:
        raise RunInterrupted(f"step {step.step_key!r} changed under this pass")


def run_attempt_in_pass(
    rp: ReplayPass, step: WorkflowStep, func: Callable[..., Any] | None, policy: RetryPolicy
) -> WorkflowStep:
    assert func is not None
    started_by = rp.run.started_by.get_username() if rp.run.started_by else None
    args = () if step.kind == "callable" else (step.data, step_context(step, started_by))
    try:
        record_outcome(step, call_with_heartbeat(step, func, args), policy)
    except StepSuperseded as exc:
        raise RunInterrupted(str(exc)) from exc
    return step


def call_with_heartbeat(
    step: WorkflowStep, func: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[bool, Any]:
    """Call user code outside any transaction; (True, result) or (False, error dict)."""
    heartbeat.hold_step(step.pk, step.attempt)
    try:
        value = func(*args)
    except Exception as exc:
        return False, describe_error(exc, step_key=step.step_key)
    finally:
        heartbeat.drop_step(step.pk, step.attempt)
    try:
        return True, round_trip(value)
    except NotStorableJson as exc:
        error = StepResultNotSerializable(step.step_key, str(exc))
        return False, describe_error(error, step_key=step.step_key)


def record_outcome(
    step: WorkflowStep,
    outcome: tuple[bool, Any],
    policy: RetryPolicy,
    *,
    continue_as: str | None = None,
) -> WorkflowRun | None:
    """Write the attempt's result or error; raises StepSuperseded if a newer attempt owns it.

    With `continue_as` (a new lease holder id), an outcome the run must act on (a result, or the
    last attempt's error) also takes the run lease in the same write if it is free; the run
    comes back leased to `continue_as`, else None.
    """
    succeeded, value = outcome
    if succeeded:
        return _record(
            step, StepStatus.SUCCEEDED, continue_as, result=value, error=None, lease_expires_at=None
        )
    fields: dict[str, Any] = {"error": value, "lease_expires_at": None, "wake_at": None}
    if value.get("code") == StepResultNotSerializable.code:
        # Retrying cannot make a value storable: spend the budget now.
        fields["attempt_limit"] = step.attempt
    elif step.attempt < step.attempt_limit:
        fields["wake_at"] = timezone.now() + timedelta(milliseconds=policy.backoff_ms(step.attempt))
    exhausted = step.attempt >= fields.get("attempt_limit", step.attempt_limit)
    return _record(step, StepStatus.FAILED, continue_as if exhausted else None, **fields)


def _record(
    step: WorkflowStep, target: str, continue_as: str | None, **fields: Any
) -> WorkflowRun | None:
    if continue_as is None:
        move_step(step, target, expected=[StepStatus.RUNNING], **fields)
        return None
    return move_step_taking_run_lease(
        step, target, continue_as, expected=[StepStatus.RUNNING], **fields
    )


def dispatch_new_step(rp: ReplayPass, step_key: str, fields: dict[str, Any]) -> WorkflowStep:
    """Create a queued step and dispatch it, then park the run.

    When django-q2's queue is a table of this PostgreSQL database, the step, its message and the
    run lease's release are one statement (one commit instead of four); otherwise the step is
    created pending and `dispatch_step` enqueues it, then marks it scheduled.
    """
    if not (fast_path_available() and queue_in_engine_database()):
        return dispatch_step(rp, _create_in_pass(rp, step_key, StepStatus.PENDING, fields))
    definition = registry.get_step_function(fields["function_name"])
    try:
        message = step_message(rp.run.pk, step_key, definition.queue)
    except WorkflowDispatchException as exc:
        _create_in_pass(rp, step_key, StepStatus.PENDING, fields)  # recovery relays it
        raise DispatchFailed(exc) from exc
    step, rp.lease_released = create_dispatched_step(
        rp.run.pk, rp.holder, step_key, message, **fields
    )
    rp.steps[step_key] = step
    raise RunParked(step_key)


def _create_in_pass(
    rp: ReplayPass, step_key: str, status: str, fields: dict[str, Any]
) -> WorkflowStep:
    step = create_step_in_run(rp.run.pk, rp.holder, step_key, status=status, **fields)
    rp.steps[step_key] = step
    return step


def dispatch_step(rp: ReplayPass, step: WorkflowStep) -> WorkflowStep:
    """Enqueue the step for a worker, then mark it scheduled; the run waits for it."""
    definition = registry.get_step_function(step.function_name or "")
    try:
        enqueue_step(rp.run.pk, step.step_key, definition.queue)
    except WorkflowDispatchException as exc:
        raise DispatchFailed(exc) from exc
    if step.status == StepStatus.PENDING:
        # A worker may have claimed it already: then the guard refuses and that is fine.
        with contextlib.suppress(InvalidTransition, StepSuperseded):
            move_step(step, StepStatus.SCHEDULED, expected=[StepStatus.PENDING])
    raise RunParked(step.step_key)


def execute_queued_step(run_id: Any, step_key: str) -> None:
    """The step worker: claim the step, run one attempt, record it, continue the run.

    Idempotent: a duplicate or late message finds nothing to claim and returns quietly.
    """
    step, started_by = claim_fresh_step(run_id, step_key, registry.step_functions)
    if step is None:
        step, exhausted, started_by = _claim_with_checks(run_id, step_key)
        if step is None:
            if exhausted:
                continue_run(run_id)
            return
    definition = registry.get_step_function(step.function_name or "")
    args = (step.data, step_context(step, started_by))
    outcome = call_with_timeout(step, definition.func, args)
    policy = RetryPolicy.from_stored(step.retries, step.retry_delay)
    holder = new_lease_holder() if serves_orchestrator_cluster() else None
    try:
        run = record_outcome(step, outcome, policy, continue_as=holder)
    except (StepSuperseded, InvalidTransition):
        # A newer attempt owns the step (our lease lapsed): its outcome is the one that counts.
        logger.info("pikku_workflows: attempt %s of %s superseded", step.attempt, step_key)
        return
    if step.status == StepStatus.SUCCEEDED or step.attempt >= step.attempt_limit:
        continue_run(run_id, None if run is None or holder is None else LeasedRun(run, holder))
    # Otherwise the retry waits on wake_at; the timer loop dispatches it when due.


def _claim_with_checks(run_id: Any, step_key: str) -> tuple[WorkflowStep | None, bool, str | None]:
    """The general claim (new attempts, lapsed leases, a function this worker lacks):
    (the step now running under our attempt or None, whether it ended exhausted, started_by)."""
    function_name = (
        WorkflowStep.objects.filter(run_id=run_id, step_key=step_key)
        .values_list("function_name", flat=True)
        .first()
    )
    if function_name is None:
        return None, False, None
    if function_name not in registry.step_functions:
        suspend_for_missing_function(run_id, step_key, function_name)
        return None, False, None
    step, exhausted = claim_step(run_id, step_key)
    if step is None:
        return None, exhausted, None
    return step, False, step.run.started_by.get_username() if step.run.started_by else None


def continue_run(run_id: Any, leased: LeasedRun | None = None) -> None:
    """Let the orchestrator see a step outcome it must act on: run its pass right here (one queue
    hop per step instead of two), or enqueue it.

    In place only when this worker serves the orchestrators' cluster (`ORCHESTRATOR_QUEUE`, or
    the project's own cluster when that is unset): a step routed with `queue=` to another
    cluster (a GPU box, a slow lane) must not run orchestrator passes there, so its worker
    enqueues the pass to the orchestrators' cluster instead. The pass is safe anywhere it runs:
    it takes the run lease, or asks the live holder for one more pass (`rerun_requested`).
    `leased` is the run when recording the outcome already took its lease for this worker.
    """
    if not serves_orchestrator_cluster():
        enqueue_orchestration(run_id)
        return
    from .orchestrator import orchestrate  # the orchestrator imports the steps, which import us

    orchestrate(run_id, leased=leased)


def call_with_timeout(
    step: WorkflowStep, func: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[bool, Any]:
    """Run one attempt, bounded by the step's timeout when it has one."""
    if step.timeout_ms is None:
        return call_with_heartbeat(step, func, args)
    outcome: list[tuple[bool, Any]] = []

    def attempt() -> None:
        try:
            outcome.append(call_with_heartbeat(step, func, args))
        finally:
            connection.close()

    # Python cannot stop a thread: a timed-out attempt runs on, but its late outcome is refused
    # (the step is no longer running under that attempt).
    worker = threading.Thread(target=attempt, name=f"pikku-step-{step.step_key}", daemon=True)
    worker.start()
    worker.join(step.timeout_ms / 1000)
    if outcome:
        return outcome[0]
    return False, {
        "code": "TIMEOUT",
        "message": f"Step {step.step_key!r} exceeded its timeout of {step.timeout_ms} ms.",
        "type": "TimeoutError",
        "step_key": step.step_key,
    }


def suspend_for_missing_function(run_id: Any, step_key: str, function_name: str) -> None:
    """This worker lacks the step function: hand the step back to pending (no attempt spent)
    and suspend the run until the function is deployed and the run resumed."""
    step = WorkflowStep.objects.filter(
        run_id=run_id, step_key=step_key, status__in=[StepStatus.PENDING, StepStatus.SCHEDULED]
    ).first()
    if step is None:
        return  # a superseded or settled dispatch: not this message's business
    message = (
        f"Step function {function_name!r} is not registered on this worker (step {step_key!r}); "
        "deploy it and resume the run."
    )
    try:
        with transaction.atomic():
            if step.status == StepStatus.SCHEDULED and not move_step_txn(
                step, StepStatus.PENDING, expected=[StepStatus.SCHEDULED]
            ):
                return  # another worker claimed it meanwhile
            move_run(
                run_id,
                RunStatus.SUSPENDED,
                expected=[RunStatus.RUNNING],
                error={"code": "RPC_NOT_FOUND", "message": message, "step_key": step_key},
            )
    except InvalidTransition:
        return  # the run is no longer running: nothing to suspend
