"""The orchestrator pass: take the run lease, replay the body from the top, record how it ended.

A settled run returns before any lock, so a late queue message never re-enters a finished body.
A pass abandoned by the engine's own statements leaves the run as it was (running) and raises
what failed, for the queue or recovery to run it again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from functools import partial
from typing import Any

from django.db import DataError
from django.db import Error as DatabaseError

from ... import events
from ...control_flow import (
    ContinueAsNew,
    PassAbandoned,
    ReplayDiverged,
    RunInterrupted,
    RunParked,
    SuspendRequested,
)
from ...dispatch import prompt_orchestration
from ...exceptions import (
    GraphRunFailed,
    InvalidTransition,
    NonDeterministicReplay,
    OutputNotSerializable,
    StepFailed,
    StepSuperseded,
    VersionNotFound,
    WorkflowCancelled,
    WorkflowNotDeployed,
)
from ...models import WorkflowRun, WorkflowStep
from ...observability.instruments import record_pass_after_commit
from ...observability.log_context import logging_for_run
from ...observability.tracing import note_run
from ...registry import registry
from ...serialization import NotStorableJson, describe_error, round_trip
from ...status import Compensation, RunStatus
from ..store.continue_transitions import continue_run, successor_of
from ..store.leases import (
    abandon_run_lease,
    acquire_run_lease,
    heartbeat,
    new_lease_holder,
    release_run_lease,
    request_rerun,
)
from ..store.run_transitions import move_run
from ..store.step_transitions import UnrecordedSuccess
from . import children
from .attempts import record_kept, savepoint_if_in_transaction
from .compensation import compensate, needs_compensation, start_compensating
from .graphs import run_graph
from .replay_pass import LeasedRun, ReplayPass, driving
from .versions import status_on_non_determinism
from .workflow import Workflow, engine_statements

logger = logging.getLogger(__name__)

LEASE_ATTEMPTS = 3


def orchestrate(
    run_id: Any, *, inline_caller: bool = False, leased: LeasedRun | None = None
) -> None:
    """Drive the run as far as it can go now. Safe to call any number of times, concurrently.

    `leased`: the run as its caller just leased it (an inline start, a step worker continuing
    in place); otherwise the pass reads the run and takes the lease itself. Raises the error of
    a pass the engine's own statements abandoned (the run is left running).
    """
    if leased is None:
        leased = _read_and_lease(run_id)
    while leased is not None:
        try:
            ended = _drive(leased, inline_caller)
        except PassAbandoned as abandoned:
            raise abandoned.error from abandoned
        run = leased.run
        if run.status == RunStatus.CONTINUED:
            # An inline caller drives the chain to its end, a link at a time (no recursion).
            leased = _read_and_lease(successor_of(run.pk)) if inline_caller else None
            continue
        if ended and run.parent_step_id is not None:
            children.notify_parent(run.pk)
        return


def _drive(leased: LeasedRun, inline_caller: bool) -> bool:
    """Passes until the lease is released (one more each time a rerun was requested); True when
    the run ended in one of them."""
    run, holder, known_steps = leased.run, leased.holder, leased.steps
    heartbeat.hold_run(run.pk, holder)
    note_run(run)
    ended = False
    try:
        with driving(run.pk), logging_for_run(run.pk, run.workflow):
            while True:
                began = time.monotonic()
                ended_now, released = _replay(run, holder, inline_caller, known_steps)
                record_pass_after_commit(run.workflow, time.monotonic() - began)
                ended = ended_now or ended
                if released or release_run_lease(run.pk, holder):
                    return ended
                known_steps = None  # a rerun: another pass may have written steps meanwhile
                run.refresh_from_db(
                    fields=["status", "state", "compensation", "compensation_cause"]
                )
    except BaseException:
        # The queue redelivers or recovery relays; don't make the next pass wait out the lease.
        _abandon_lease(run.pk, holder)
        raise
    finally:
        heartbeat.drop_run(run.pk)


def _abandon_lease(run_id: Any, holder: str) -> None:
    # If the database is what failed (or the caller's transaction is doomed), the lease lapses
    # by itself, and whoever runs the pass reports the error that ended it.
    with contextlib.suppress(DatabaseError):
        abandon_run_lease(run_id, holder)


def _read_and_lease(run_id: Any) -> LeasedRun | None:
    """The run and our lease on it; None for a settled, suspended or unknown run (the message is
    acknowledged and does nothing) or when another pass holds the lease and will rerun for us."""
    run = WorkflowRun.objects.select_related("started_by").filter(pk=run_id).first()
    if run is None or run.status != RunStatus.RUNNING:
        return None
    holder = _take_lease(run_id)
    return None if holder is None else LeasedRun(run, holder)


def _take_lease(run_id: Any) -> str | None:
    """Our lease holder id, or None when another pass holds the lease and will rerun for us."""
    holder = new_lease_holder()
    for _ in range(LEASE_ATTEMPTS):
        if acquire_run_lease(run_id, holder):
            return holder
        if request_rerun(run_id):
            return None
        # The lease was released between our two writes, or the run stopped running.
    return None


def _replay(
    run: WorkflowRun, holder: str, inline_caller: bool, steps: dict[str, WorkflowStep] | None
) -> tuple[bool, bool]:
    """One pass: (the run ended in it, the lease is already released: by the write that ended
    the run or by the dispatch that parked it)."""
    if run.status != RunStatus.RUNNING:
        return False, False
    definition = registry.workflows.get(run.workflow)
    # A graph run goes on from the definition it started on, registered here or not.
    if definition is None and not run.graph_hash:
        _suspend(run, holder, describe_error(WorkflowNotDeployed(run.workflow), traceback=False))
        return False, False
    drive_child = partial(orchestrate, inline_caller=True)
    graph = definition is None or bool(run.graph_hash)
    undoing = run.compensation == Compensation.RUNNING
    # A graph pass reads its steps itself, once it knows its definition (graphs.run_graph).
    known = {} if graph and steps is None and not undoing else steps
    rp = ReplayPass.begin(
        run, holder, inline_caller=inline_caller, drive_child=drive_child, steps=known
    )
    try:
        if undoing:
            ended = _undo(run, holder, rp)  # its steps are being undone: the body is not replayed
        else:
            body = (
                partial(run_graph, rp, steps is None)
                if definition is None or graph
                else definition.func
            )
            ended = _run_body(run, holder, rp, body)
    finally:
        rp.event_loop.close()
        rp.listener.close()
    return ended, ended or rp.lease_released


def _run_body(run: WorkflowRun, holder: str, rp: ReplayPass, body: Any) -> bool:
    """Replay the body from the top; True when the run ended (completed, failed) in it. Only
    the body's own exceptions fail the run: PassAbandoned passes through."""
    try:
        with rp.running_body():
            output = body(Workflow(rp), rp.input)
    except (RunParked, SuspendRequested, RunInterrupted):
        _recorded(rp)
        return False
    except ContinueAsNew as handover:
        return _recorded(rp) and _continue(run, holder, rp, handover.input)
    except PassAbandoned:
        with contextlib.suppress(Exception, RunInterrupted):
            record_kept(rp)  # the database may still take it; if not, the step runs again
        raise
    except ReplayDiverged as diverged:
        return _recorded(rp) and _diverged(run, holder, diverged.error)
    except VersionNotFound as exc:
        error = describe_error(exc, traceback=False)
        return _recorded(rp) and _end(run, holder, RunStatus.FAILED, error=error)
    except GraphRunFailed as exc:
        # The planner's verdict on the run's own graph: no traceback worth keeping.
        error = describe_error(exc, step_key=exc.step_key, traceback=False)
        return _recorded(rp) and _fail(run, holder, rp, error)
    except StepFailed as exc:
        return _recorded(rp) and _fail(run, holder, rp, _step_failed_error(exc))
    except Exception as exc:
        return _recorded(rp) and _fail(run, holder, rp, describe_error(exc))
    try:
        output = round_trip(output)
    except NotStorableJson as exc:
        error = describe_error(OutputNotSerializable(str(exc)), traceback=False)
        return _recorded(rp) and _fail(run, holder, rp, error)
    return _complete(run, holder, rp, output)


def _complete(run: WorkflowRun, holder: str, rp: ReplayPass, output: Any) -> bool:
    """End the run completed. The success the pass kept for its next write (its last step's)
    is recorded by the same statement, fenced as ever: one commit fewer per run. If the
    database refuses that statement, the two are written one at a time."""
    kept, rp.unrecorded = rp.unrecorded, None
    if kept is not None:
        try:
            with savepoint_if_in_transaction():
                return _end(run, holder, RunStatus.COMPLETED, after=kept, output=output, error=None)
        except DataError:
            rp.unrecorded = kept
    return _recorded(rp) and _end(run, holder, RunStatus.COMPLETED, output=output, error=None)


def _fail(run: WorkflowRun, holder: str, rp: ReplayPass, error: dict[str, Any]) -> bool:
    """The body failed with `error`: end the run failed, or first undo what its steps did
    (`compensate=`); True when the run ended in this pass."""
    try:
        with engine_statements():
            if not needs_compensation(rp):
                return _end(run, holder, RunStatus.FAILED, error=error)
            start_compensating(rp, error)
    except RunInterrupted:
        return False
    return _undo(run, holder, rp)


def _undo(run: WorkflowRun, holder: str, rp: ReplayPass) -> bool:
    """Drive the compensations; once all are done the run ends as its cause says (cancelled for
    a cancel, else failed), or failed with COMPENSATION_FAILED."""
    try:
        with engine_statements():
            failure = compensate(rp)
    except (RunParked, SuspendRequested, RunInterrupted):
        _recorded(rp)
        return False
    if not _recorded(rp):
        return False
    if failure is not None:
        return _end(run, holder, RunStatus.FAILED, error=failure, compensation=Compensation.FAILED)
    cause = run.compensation_cause or {}
    status = (
        RunStatus.CANCELLED if cause.get("code") == WorkflowCancelled.code else RunStatus.FAILED
    )
    return _end(run, holder, status, error=cause, compensation=Compensation.COMPENSATED)


def _recorded(rp: ReplayPass) -> bool:
    """Write the success the pass kept for its next write (the pass ends now); False when the
    database refused it: the step failed, and one more pass replays the body."""
    try:
        with engine_statements():
            record_kept(rp)
    except RunInterrupted:
        return False
    return True


def _step_failed_error(exc: StepFailed) -> dict[str, Any]:
    step_error = exc.error or {}
    return {
        "code": StepFailed.code,
        "message": exc.message,
        "type": step_error.get("type", "pikku_workflows.StepFailed"),
        "traceback": step_error.get("traceback", ""),
        "step_key": exc.step_key,
    }


def _end(
    run: WorkflowRun,
    holder: str,
    status: str,
    *,
    after: UnrecordedSuccess | None = None,
    **fields: Any,
) -> bool:
    try:
        move_run(
            run.pk,
            status,
            expected=[RunStatus.RUNNING],
            lease_holder=holder,
            scheduled=run.schedule_id is not None,
            after=after,
            **fields,
        )
    except (InvalidTransition, RunInterrupted, StepSuperseded):
        # An operator cancelled or suspended the run meanwhile, or our lease lapsed: theirs wins.
        logger.info("pikku_workflows: run %s changed during its pass; outcome dropped", run.pk)
        return False
    run.status = status
    events.announce_run_finished(run.pk, status, fields.get("error"), workflow=run.workflow)
    return True


def _continue(run: WorkflowRun, holder: str, rp: ReplayPass, input: Any) -> bool:
    """End the run continued and create its successor (docs/long-lived-runs.md); an inline
    caller drives the successor next, otherwise a worker's pass does. True when the run ended."""
    try:
        with engine_statements():
            successor = continue_run(run, input, lease_holder=holder)
    except (InvalidTransition, RunInterrupted):
        logger.info("pikku_workflows: run %s changed during its pass; hand-over dropped", run.pk)
        return False
    if not rp.inline_caller:
        prompt_orchestration(successor.pk)  # refused: recovery relays a run with no first pass
    run.status = RunStatus.CONTINUED
    events.announce_run_finished(run.pk, RunStatus.CONTINUED, None, workflow=run.workflow)
    return True


def _diverged(run: WorkflowRun, holder: str, error: NonDeterministicReplay) -> bool:
    """Replay asked for another function at a recorded key: fail the run, or suspend it for an
    operator to fork or cancel (ON_NON_DETERMINISM); True when the run ended."""
    described = describe_error(error, step_key=error.step_key, traceback=False)
    if status_on_non_determinism() == RunStatus.SUSPENDED:
        _suspend(run, holder, described)
        return False
    return _end(run, holder, RunStatus.FAILED, error=described)


def _suspend(run: WorkflowRun, holder: str, error: dict[str, Any]) -> None:
    # A rolling deploy can deliver a run to a worker that lacks its code (or has code its history
    # does not fit): wait for an operator.
    try:
        running = [RunStatus.RUNNING]
        move_run(run.pk, RunStatus.SUSPENDED, expected=running, lease_holder=holder, error=error)
    except (InvalidTransition, RunInterrupted):
        return
    run.status = RunStatus.SUSPENDED
