"""Replaying stored histories against the current code without running a step: which runs would
hit NON_DETERMINISTIC if they replayed now (`manage.py pikku_replay_check`), so CI can refuse a
deploy that would strand runs in flight.

A check replays the body with a `wf` whose steps only read: a recorded step gives its stored
outcome (after the same key and function checks a pass makes), and the first step the history
does not hold ends the check, as far as the history can tell. No step function, child run or
timer runs, and the check writes nothing (it runs in a transaction it rolls back).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet

from ...control_flow import ControlFlowSignal, ReplayDiverged, RunParked
from ...exceptions import NonDeterministicReplay, StepFailed, VersionNotFound, WorkflowNotDeployed
from ...models import WorkflowRun, WorkflowStep
from ...registry import registry
from ...serialization import round_trip
from ...status import RunStatus, StepStatus
from ..replay.patches import run_patched
from ..replay.replay_pass import ReplayPass, read_steps
from ..replay.steps import (
    StepCall,
    check_same_step,
    on_error_call,
    sleep_call,
    suspend_key,
    unstarted,
)
from ..replay.versions import run_graph_definition
from ..replay.workflow import Workflow
from ..store.run_state import checked_state

# Runs that can still replay: in flight, suspended, and failed (retry_run replays those).
REPLAYABLE_STATUSES = (RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.FAILED)
DEFAULT_LIMIT = 100

OK = "OK"
NON_DETERMINISTIC = NonDeterministicReplay.code
BODY_ERROR = "BODY_ERROR"
NOT_REGISTERED = WorkflowNotDeployed.code
VERSION_NOT_FOUND = VersionNotFound.code
# Runs whose recorded error is a replay's NON_DETERMINISTIC.
_STOPPED_BY_NON_DETERMINISM = Q(error__code=NON_DETERMINISTIC)


@dataclass(frozen=True)
class ReplayVerdict:
    """What replaying one run's history under the current code found. `verdict`: OK,
    NON_DETERMINISTIC (`step_key` the first key that asks for another function), BODY_ERROR
    (the body raised), WORKFLOW_NOT_FOUND (not registered here), VERSION_NOT_FOUND (a graph
    run's stored definition is gone)."""

    run_id: str
    workflow: str
    status: str
    verdict: str
    step_key: str | None = None
    message: str = ""


class _Frontier(RunParked):
    """The body reached a step the history does not hold (or holds unfinished): it agrees with
    the history as far as the history goes (a gather's member waits there, as in a pass)."""


def replayable_runs(
    workflow: str | None = None,
    *,
    since: datetime | None = None,
    statuses: Sequence[str] = REPLAYABLE_STATUSES,
) -> QuerySet[WorkflowRun]:
    """The runs a check looks at, newest first: of `statuses` (replayable ones), of `workflow`,
    started at or after `since`; not those a replay already stopped with NON_DETERMINISTIC
    (failed or suspended by an earlier deploy: this code cannot strand them again)."""
    runs = _runs(workflow, since, statuses).exclude(_STOPPED_BY_NON_DETERMINISM)
    return runs.order_by("-created_at")


def already_stopped(
    workflow: str | None = None,
    *,
    since: datetime | None = None,
    statuses: Sequence[str] = REPLAYABLE_STATUSES,
) -> int:
    """How many runs `replayable_runs` leaves out because a replay already stopped them."""
    return _runs(workflow, since, statuses).filter(_STOPPED_BY_NON_DETERMINISM).count()


def _runs(
    workflow: str | None, since: datetime | None, statuses: Sequence[str]
) -> QuerySet[WorkflowRun]:
    runs = WorkflowRun.objects.filter(status__in=statuses)
    if workflow is not None:
        runs = runs.filter(workflow=workflow)
    if since is not None:
        runs = runs.filter(created_at__gte=since)
    return runs


def check_recent_runs(
    workflow: str | None = None,
    limit: int = DEFAULT_LIMIT,
    *,
    since: datetime | None = None,
    statuses: Sequence[str] = REPLAYABLE_STATUSES,
) -> list[ReplayVerdict]:
    """Check the `limit` most recent of `replayable_runs(workflow, since, statuses)`."""
    runs = replayable_runs(workflow, since=since, statuses=statuses)
    return [check_run(run) for run in runs[:limit]]


def check_run(run: WorkflowRun) -> ReplayVerdict:
    def verdict(outcome: str, step_key: str | None = None, message: str = "") -> ReplayVerdict:
        return ReplayVerdict(str(run.pk), run.workflow, run.status, outcome, step_key, message)

    if run.graph_hash:
        # A graph run goes on from its stored definition: only that must still be there.
        try:
            run_graph_definition(run)
        except VersionNotFound as exc:
            return verdict(VERSION_NOT_FOUND, message=exc.message)
        return verdict(OK)
    definition = registry.workflows.get(run.workflow)
    if definition is None:
        return verdict(NOT_REGISTERED, message=f"{run.workflow!r} is not registered here")
    return _replay_history(run, definition.func, verdict)


def _replay_history(
    run: WorkflowRun, body: Callable[..., Any], verdict: Callable[..., ReplayVerdict]
) -> ReplayVerdict:
    rp = ReplayPass(
        run,
        holder=f"replay-check-{uuid.uuid4().hex}",  # holds no lease: no guarded write can land
        inline_caller=False,
        steps=read_steps(run.pk),
        drive_child=_refuse_child,
        input=round_trip(run.input),
    )
    with transaction.atomic():
        try:
            with rp.running_body():
                body(_CheckingWorkflow(rp, drive=_recorded_outcome), rp.input)
        except ReplayDiverged as diverged:
            error = diverged.error
            return verdict(NON_DETERMINISTIC, error.step_key, error.message)
        except (ControlFlowSignal, StepFailed):
            pass  # the history's frontier, a wait, or a step failure the run recorded anyway
        except Exception as exc:
            return verdict(BODY_ERROR, rp.last_key, f"{type(exc).__name__}: {exc}")
        finally:
            transaction.set_rollback(True)  # belt and braces: whatever the body wrote is undone
    return verdict(OK)


def _refuse_child(run_id: Any) -> None:
    raise _Frontier(f"child run {run_id}")


class _CheckingWorkflow(Workflow):
    """The `wf` of a replay check: recorded steps give their stored outcome (its `drive` is
    `_recorded_outcome`), nothing runs and nothing is written; the first step the history does
    not hold ends the check."""

    def sleep(self, key: str, duration: int | str | timedelta) -> None:
        _recorded_outcome(self._replay, sleep_call(self._replay, key, duration))

    def suspend(self, reason: str) -> None:
        physical, _ = suspend_key(self._replay, reason)
        step = self._replay.steps.get(physical)
        if step is None or step.status != StepStatus.SUCCEEDED:
            raise _Frontier(physical)

    def set_state(self, key: str, value: Any) -> None:
        self._replay.state[key] = checked_state(key, value)

    def patched(self, patch_id: str) -> bool:
        return run_patched(self._replay, patch_id, record=False)

    def deprecate_patch(self, patch_id: str) -> None:
        run_patched(self._replay, patch_id, record=False)


def _recorded_outcome(rp: ReplayPass, call: StepCall) -> Any:
    """The recorded step's result (StepFailed when it was exhausted), after checking it was
    recorded for the same function; _Frontier when it was not recorded or is unfinished."""
    step = rp.steps.get(call.key)
    if step is None or unstarted(step):
        raise _Frontier(call.key)
    check_same_step(step, call)
    if step.status == StepStatus.SUCCEEDED:
        return step.result
    if step.status == StepStatus.FAILED and step.attempt >= step.attempt_limit:
        _check_on_error(rp, call, step)
        raise StepFailed(call.key, step.error or {})
    raise _Frontier(call.key)


def _check_on_error(rp: ReplayPass, call: StepCall, step: WorkflowStep) -> None:
    handler = on_error_call(call, step)
    recorded = rp.steps.get(handler.key) if handler is not None else None
    if handler is not None and recorded is not None:
        check_same_step(recorded, handler)
