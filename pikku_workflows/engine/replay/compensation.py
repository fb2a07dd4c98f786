"""Undoing a run's succeeded steps (`compensate=`, docs/code-workflows.md "Compensation"): when
the run fails (after its `on_error` handlers) or is cancelled with `compensate=True`, each
succeeded step whose step function names a compensation is undone by a durable step
`<key>:compensate` (its own retries; `{"data": input, "result": result}`), one at a time, in
reverse order of completion. The pass drives them instead of the body until all are done.
"""

from __future__ import annotations

from typing import Any

from ...conf import pikku_settings
from ...control_flow import RunParked
from ...exceptions import CompensationFailed, StepFailed
from ...models import WorkflowStep
from ...registry import registry
from ...retry import RetryPolicy
from ...serialization import describe_error
from ...status import Compensation, StepKind, StepStatus
from ...step_keys import compensation_key, is_engine_key
from ..store.run_transitions import begin_compensation
from . import steps
from .attempts import record_kept
from .replay_pass import ReplayPass, step_ended_at

# A body's steps still on their way (a cancel asked for compensation meanwhile): what they do
# is undone too, once they settled.
_ON_THEIR_WAY = (StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING)


def needs_compensation(rp: ReplayPass) -> bool:
    """Whether any succeeded step of the run has a step that undoes it."""
    return bool(_undoable(rp))


def start_compensating(rp: ReplayPass, cause: dict[str, Any]) -> None:
    """The run's body failed with `cause`: from now on its passes undo instead of replaying."""
    record_kept(rp)
    begin_compensation(rp.run.pk, cause, lease_holder=rp.holder)
    rp.run.compensation, rp.run.compensation_cause = Compensation.RUNNING, cause


def compensate(rp: ReplayPass) -> dict[str, Any] | None:
    """Undo the succeeded steps, latest first; None when all are undone, else the
    COMPENSATION_FAILED error of the first compensation that spent its attempts. RunParked
    while one waits for a worker (or a step of the body is still on its way)."""
    waiting = [
        step.step_key
        for step in rp.steps.values()
        if step.status in _ON_THEIR_WAY
        and step.kind in (StepKind.FUNCTION, StepKind.CALLABLE)
        and not is_engine_key(step.step_key)
    ]
    if waiting:
        raise RunParked(waiting[0])
    for step, undo in _undoable(rp):
        try:
            steps.drive_call(rp, _compensation_call(step, undo))
        except StepFailed as failed:
            error = CompensationFailed(failed.step_key, failed.error.get("message", ""))
            described = describe_error(error, step_key=failed.step_key, traceback=False)
            return {**described, "cause": rp.run.compensation_cause}
    return None


def _undoable(rp: ReplayPass) -> list[tuple[WorkflowStep, str]]:
    """(step, the step function undoing it), latest completion first. A copied step (a fork's)
    was done by another run; the engine's own steps undo nothing."""
    found = []
    for step in rp.steps.values():
        if step.status != StepStatus.SUCCEEDED or step.kind != StepKind.FUNCTION:
            continue
        if step.copied or is_engine_key(step.step_key):
            continue
        definition = registry.step_functions.get(step.function_name or "")
        if definition is not None and definition.compensate:
            found.append((step, definition.compensate))
    return sorted(found, key=lambda pair: _completed(pair[0]), reverse=True)


def _completed(step: WorkflowStep) -> tuple[Any, Any, str]:
    return (step_ended_at(step) or step.created_at, step.created_at, step.step_key)


def _compensation_call(step: WorkflowStep, undo: str) -> steps.StepCall:
    definition = registry.step_functions.get(undo)
    policy = RetryPolicy.resolve(None, None, pikku_settings.DEFAULT_STEP_RETRIES)
    return steps.StepCall(
        key=compensation_key(step.step_key),
        from_key=step.step_key,
        kind=StepKind.FUNCTION,
        function_name=undo,
        data={"data": step.data, "result": step.result},
        policy=policy,
        timeout_ms=definition.timeout_ms if definition else None,
        func=definition.func if definition else None,
        definition=definition,
        atomic=definition.atomic if definition else False,
    )
