"""The bodies of the two django-q2 tasks: an orchestrator pass, and the step worker (claim a
queued step, run one attempt, record it, let the run go on; a worker without the step's
function hands it back). Each handles its message: steps its passes reach may run in place.

Idempotent: a duplicate or late message finds nothing to claim and returns quietly. A message
whose pass the engine's own statements abandoned (the database or the queue failing) ends
quietly too: the run is left running, recovery relays it from the tables, and the failure goes
to the worker's outage log (architecture §3), not to django-q2 as a failed task.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, close_old_connections, transaction

from ... import events
from ...dispatch import enqueue_orchestration, serves_orchestrator_cluster
from ...exceptions import (
    InvalidTransition,
    StepFunctionNotDeployed,
    StepSuperseded,
    WorkflowDispatchException,
)
from ...models import WorkflowRun, WorkflowStep
from ...observability.log_context import logging_for_run
from ...outages import outages
from ...registry import registry
from ...retry import RetryPolicy
from ...serialization import describe_error
from ...status import RunStatus, StepStatus
from ..replay.async_attempts import call_async_user_code, is_async
from ..replay.atomic_steps import call_atomically
from ..replay.attempts import (
    Outcome,
    call_user_code,
    claim_next_attempt,
    record_outcome,
    step_context,
)
from ..replay.event_loop import OwnedEventLoop
from ..replay.orchestrator import orchestrate
from ..replay.queued import handling_message
from ..replay.replay_pass import LeasedRun
from ..store.leases import new_lease_holder
from ..store.run_transitions import move_run
from ..store.step_transitions import claim_queued_step, move_step_txn

logger = logging.getLogger(__name__)


def run_pass(run_id: Any) -> None:
    """The `orchestrate` task: one pass of the run, handling its message."""
    with handling_message(holds_receives=True), _abandoned_quietly(f"the pass of run {run_id}"):
        orchestrate(run_id)


def execute_queued_step(run_id: Any, step_key: str) -> None:
    """The `execute_step` task: claim the step, run one attempt, record it, continue the run."""
    with handling_message(), _abandoned_quietly(f"step {step_key!r} of run {run_id}"):
        _execute(run_id, step_key)


@contextlib.contextmanager
def _abandoned_quietly(what: str) -> Iterator[None]:
    try:
        yield
    except (DatabaseError, WorkflowDispatchException) as exc:
        outages.failed(what, exc)
        close_old_connections()


def _execute(run_id: Any, step_key: str) -> None:
    # The one-statement claim takes functions no limit or rate governs; the general claim
    # asks those (`claim_next_attempt`).
    ungoverned = [name for name, d in registry.step_functions.items() if not d.governed]
    step = claim_queued_step(run_id, step_key, ungoverned)
    started_by = getattr(step, "started_by_name", None)
    if step is None:
        step, started_by = _claim_with_checks(run_id, step_key)
        if step is None:
            return
    with logging_for_run(run_id, _workflow_of(step)):
        _run_attempt(run_id, step, started_by)


def _workflow_of(step: WorkflowStep) -> str | None:
    """The workflow of the step's run: from the one-statement claim, else read."""
    name = getattr(step, "workflow_name", None)
    if name is None:
        name = WorkflowRun.objects.filter(pk=step.run_id).values_list("workflow", flat=True).first()
    return name


def _run_attempt(run_id: Any, step: WorkflowStep, started_by: str | None) -> None:
    step_key = step.step_key
    definition = registry.get_step_function(step.function_name or "")
    args = (step.data, step_context(step, started_by))
    policy = RetryPolicy.from_stored(step.retries, step.retry_delay)
    holder = new_lease_holder() if serves_orchestrator_cluster() else None
    try:
        outcome = _call(step, definition.func, args, holder)
        recorded = record_outcome(step, outcome, policy, continue_as=holder)
    except (StepSuperseded, InvalidTransition):
        # A newer attempt owns the step (our lease lapsed): its outcome is the one that counts.
        logger.info("pikku_workflows: attempt %s of %s superseded", step.attempt, step_key)
        return
    if recorded.wakes_run:
        run = recorded.run
        continue_run(run_id, None if run is None or holder is None else LeasedRun(run, holder))
    # Otherwise the retry waits on its timer (the timer loop dispatches it when due), or the
    # step is a gather's member and another member settles the gather last.


def _call(step: WorkflowStep, func: Any, args: tuple[Any, ...], holder: str | None) -> Outcome:
    if is_async(func):
        loop = OwnedEventLoop()  # this attempt's: closed before the run goes on
        try:
            return call_async_user_code(loop, step, func, args)
        finally:
            loop.close()
    if step.atomic:
        return call_atomically(step, func, args, continue_as=holder)
    return call_user_code(step, func, args)


def _claim_with_checks(run_id: Any, step_key: str) -> tuple[WorkflowStep | None, str | None]:
    """The general claim (new attempts, lapsed leases, a function this worker lacks): the step
    now running under our attempt (and the run's starter), or None."""
    function_name = (
        WorkflowStep.objects.filter(run_id=run_id, step_key=step_key)
        .values_list("function_name", flat=True)
        .first()
    )
    if function_name is None:
        return None, None
    if function_name not in registry.step_functions:
        suspend_for_missing_function(run_id, step_key, function_name)
        return None, None
    claim = claim_next_attempt(run_id, step_key)
    if claim.expired:
        continue_run(run_id)  # the step failed for good: the run must see it
    if not claim.claimed or claim.step is None:
        return None, None
    starter = claim.step.run.started_by
    return claim.step, starter.get_username() if starter else None


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
    orchestrate(run_id, leased=leased)


def suspend_for_missing_function(run_id: Any, step_key: str, function_name: str) -> None:
    """This worker lacks the step function: hand the step back to pending (no attempt spent)
    and suspend the run until the function is deployed and the run resumed."""
    step = WorkflowStep.objects.filter(
        run_id=run_id, step_key=step_key, status__in=[StepStatus.PENDING, StepStatus.SCHEDULED]
    ).first()
    if step is None:
        return  # a superseded or settled dispatch: not this message's business
    missing = StepFunctionNotDeployed(function_name, step_key, registry.close_names(function_name))
    events.announce_missing_function(run_id, step_key, function_name, missing.message)
    error = describe_error(missing, traceback=False)
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
                error={**error, "step_key": step_key},
            )
    except InvalidTransition:
        return  # the run is no longer running: nothing to suspend
