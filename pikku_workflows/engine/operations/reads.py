"""What a run looks like from outside, read only: its status summary (the API's run summary: what each step
did, what the run waits on), its timeline (every attempt's events and operator actions, in
order) and its state at any point of that timeline (the pure folds are in `time_travel`).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import F, Prefetch, QuerySet
from django.utils import timezone

from ...approvals.policy import approval_id_for
from ...exceptions import RunNotFound, RunPurged
from ...models import (
    WorkflowRun,
    WorkflowRunTombstone,
    WorkflowStep,
    WorkflowStepHistory,
)
from ...status import TERMINAL_RUN_STATUSES, RunStatus, StepKind, StepStatus
from ...time_travel import build_timeline, state_at
from ...waiting import AdmissionReason, WaitingKind
from ..replay.replay_pass import lease_lapsed
from ..store.admission_transitions import holders_of
from ..store.continue_transitions import successor_of
from ..store.event_log import last_seq, read_events
from ..store.overlap_transitions import active_runs
from ..store.rate_transitions import holding_limit


def run_pk(run_id: Any) -> uuid.UUID:
    """The run id as a UUID; a malformed id names no run (RunNotFound, not a ValidationError)."""
    if isinstance(run_id, uuid.UUID):
        return run_id
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        raise RunNotFound(run_id) from None


def missing_run(run_id: Any) -> RunNotFound:
    """The error for a run id that names no run: RunPurged while its tombstone is kept."""
    if WorkflowRunTombstone.objects.filter(pk=run_pk(run_id)).exists():
        return RunPurged(run_id)
    return RunNotFound(run_id)


def get_run_status(run_id: Any) -> dict[str, Any]:
    run = WorkflowRun.objects.select_related("started_by").filter(pk=run_pk(run_id)).first()
    if run is None:
        raise missing_run(run_id)
    steps = list(
        WorkflowStep.objects.filter(run_id=run.pk)
        .with_clock()
        .order_by("created_at", "step_key")
        .prefetch_related(
            Prefetch("history", queryset=WorkflowStepHistory.objects.order_by("attempt"))
        )
    )
    return summarize(run, steps)


# What the summary says of a step a cancel stopped before it ran (its timer or queued work
# disarmed): not "scheduled" or "pending", as if it were still due. The admin says the same.
CANCELLED_STEP = "cancelled"
SHOWN_STEP_STATUSES = (*StepStatus.values, CANCELLED_STEP)


def shown_step_status(run: WorkflowRun, step: WorkflowStep) -> str:
    """The step's status as every adapter shows it: as recorded, except `cancelled` for a
    pending or scheduled step of a cancelled run (the cancel disarmed its timer)."""
    disarmed = run.status == RunStatus.CANCELLED and step.wake_at is None
    if disarmed and step.status in (StepStatus.PENDING, StepStatus.SCHEDULED):
        return CANCELLED_STEP
    return step.status


def summarize(run: WorkflowRun, steps: list[WorkflowStep]) -> dict[str, Any]:
    error = run.error or None
    return {
        "id": str(run.pk),
        "workflow": run.workflow,
        "status": run.status,
        "started_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "started_by": run.started_by.get_username() if run.started_by else None,
        "steps": [_step_summary(run, step) for step in steps],
        "planned_steps": run.planned_steps,
        "waiting_on": waiting_on(run, steps),
        "output": run.output if run.status == RunStatus.COMPLETED else None,
        "error": {"code": error.get("code"), "message": error.get("message")} if error else None,
        "compensation": run.compensation,
        "continued_from": str(run.continued_from_id) if run.continued_from_id else None,
        "continued_to": _successor_id(run),
    }


# The run columns `list_summary` reads: a list page fetches these alone (`list_rows`).
LIST_COLUMNS = (
    "workflow",
    "status",
    "created_at",
    "finished_at",
    "started_by",
    "planned_steps",
    "steps_total",
    "steps_done",
    "current_step_key",
    "waiting_on",
    "last_error_code",
    "error",
    "compensation",
)


def list_rows(runs: QuerySet[WorkflowRun], *extra: str) -> QuerySet[WorkflowRun]:
    """`runs` with what `list_summary` reads of each (and the columns `extra`), in one query:
    their starters' usernames joined, every other column left in the database."""
    username = f"started_by__{get_user_model().USERNAME_FIELD}"
    return runs.select_related("started_by").only(*LIST_COLUMNS, *extra, username)


def list_summary(run: WorkflowRun) -> dict[str, Any]:
    """What a list shows of a run, from its row alone: the summary without its steps, with the
    list fields instead (`steps_total`, `steps_done`, `current_step_key`, `last_error_code`,
    and `waiting_on` as `{kind, step_key}`), as of the run's last pass or move."""
    error = run.error or None
    waiting: dict[str, Any] | None = None
    if run.waiting_on is not None:
        waiting = {"kind": run.waiting_on}
        if run.waiting_on not in (WaitingKind.SUSPEND, WaitingKind.PASS):
            waiting["step_key"] = run.current_step_key
    return {
        "id": str(run.pk),
        "workflow": run.workflow,
        "status": run.status,
        "started_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "started_by": run.started_by.get_username() if run.started_by else None,
        "planned_steps": run.planned_steps,
        "steps_total": run.steps_total,
        "steps_done": run.steps_done,
        "current_step_key": run.current_step_key,
        "waiting_on": waiting,
        "last_error_code": run.last_error_code,
        "error": {"code": error.get("code"), "message": error.get("message")} if error else None,
        "compensation": run.compensation,
    }


def _successor_id(run: WorkflowRun) -> str | None:
    """The run that continues `run` (`wf.continue_as_new`); asked only of a continued run."""
    if run.status != RunStatus.CONTINUED:
        return None
    successor = successor_of(run.pk)
    return None if successor is None else str(successor)


def _step_summary(run: WorkflowRun, step: WorkflowStep) -> dict[str, Any]:
    attempts = list(step.history.all())
    latest = next((h for h in reversed(attempts) if h.attempt == step.attempt), None)
    return {
        "key": step.step_key,
        "status": shown_step_status(run, step),
        "attempts": step.attempt,
        "duration_ms": _duration_ms(latest),
        "function": step.function_name,
        "gather": step.gather_key,
    }


def _duration_ms(history: WorkflowStepHistory | None) -> int | None:
    if history is None:
        return None
    end = history.succeeded_at or history.failed_at
    if end is None:
        return None
    start = history.running_at or history.created_at
    return max(int((end - start).total_seconds() * 1000), 0)


def waiting_on(
    run: WorkflowRun, steps: list[WorkflowStep], *, holders: bool = True
) -> dict[str, Any] | None:
    """What a live run waits for: the newest step still in flight, else its next pass (None for
    ended runs); a queued run, its admission (`holders`: with the runs holding its key's slots,
    one query)."""
    if run.status in TERMINAL_RUN_STATUSES:
        return None
    if run.status == RunStatus.QUEUED:
        return admission_wait(run, holders=holders)
    if run.status == RunStatus.SUSPENDED:
        return {"kind": WaitingKind.SUSPEND.value, "reason": (run.error or {}).get("message", "")}
    for step in reversed(steps):
        described = _step_wait(step)
        if described is not None:
            return {"step_key": step.step_key, **described}
    # Nothing in flight: a worker's next pass (queued, or no worker took the first one yet).
    return {"kind": WaitingKind.PASS.value} if run.status == RunStatus.RUNNING else None


def admission_wait(run: WorkflowRun, *, holders: bool = True) -> dict[str, Any]:
    """Why a queued run waits: its debounce window (`key`: the window's, until `until`), a rate
    (until `until`; `limit`: the workflow's limit whose rate holds starts furthest ahead), its
    concurrency key is full (`held_by`: the runs holding its slots, oldest first), or its
    schedule's run before is going. `holders`: with the limit and the holders, a query each."""
    if run.schedule_id is not None and run.concurrency_key is None and run.not_before is None:
        return _overlap_wait(run.schedule_id, holders=holders)
    held = run.not_before is not None and run.not_before > timezone.now()
    if run.debounce_key is not None and (held or run.concurrency_key is None):
        wait = _admission(AdmissionReason.DEBOUNCE, run.debounce_key)
    else:
        # A run without a key waits on nothing but its rate, even just as its time comes.
        rated = held or run.concurrency_key is None
        reason = AdmissionReason.RATE if rated else AdmissionReason.CONCURRENCY
        wait = _admission(reason, run.concurrency_key)
        limit = holding_limit(run.workflow) if holders and rated else None
        if limit is not None:
            wait["limit"] = limit
        if holders and run.concurrency_key is not None:
            wait["held_by"] = holders_of(run.workflow, run.concurrency_key)
    if run.not_before is not None:
        wait["until"] = run.not_before.isoformat()
    return wait


def _admission(reason: AdmissionReason, key: str | None) -> dict[str, Any]:
    wait: dict[str, Any] = {"kind": WaitingKind.ADMISSION.value, "reason": reason.value}
    if key is not None:
        wait["key"] = key
    return wait


def _overlap_wait(schedule_id: Any, *, holders: bool) -> dict[str, Any]:
    """A run its schedule buffered (overlap_transitions): held by the schedule's going runs."""
    wait = _admission(AdmissionReason.OVERLAP, None)
    if holders:
        going = active_runs(schedule_id).order_by("created_at").values_list("pk", flat=True)
        wait["held_by"] = [str(pk) for pk in going]
    return wait


def _step_wait(step: WorkflowStep) -> dict[str, Any] | None:
    if step.admission_hold:
        # A limit or rate holds its next attempt: which one, and until when (a rate's time; a
        # slot of `max_running` comes when one is freed).
        wait = {"kind": WaitingKind.ADMISSION.value, **step.admission_hold}
        if step.admission_hold.get("reason") == AdmissionReason.RATE and step.not_before:
            wait["until"] = step.not_before.isoformat()
        return wait
    if step.status == StepStatus.WAITING and step.child_run_id:
        return {"kind": WaitingKind.CHILD.value, "child_run_id": str(step.child_run_id)}
    if step.status == StepStatus.WAITING and step.kind in (StepKind.APPROVAL, StepKind.SIGNAL):
        return _parked_wait(step)
    if step.status == StepStatus.SCHEDULED and step.wake_at and step.kind == StepKind.SLEEP:
        return {"kind": WaitingKind.TIMER.value, "until": step.wake_at.isoformat()}
    if step.status == StepStatus.FAILED and step.wake_at and step.attempt < step.attempt_limit:
        at = step.wake_at.isoformat()
        return {"kind": WaitingKind.RETRY.value, "attempt": step.attempt + 1, "at": at, "until": at}
    if step.status == StepStatus.RUNNING and step.lease_expires_at:
        kind = WaitingKind.LEASE if lease_lapsed(step) else WaitingKind.STEP
        return {"kind": kind.value, "lease_expires_at": step.lease_expires_at.isoformat()}
    if step.status in (StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING):
        return {"kind": WaitingKind.STEP.value}
    return None


def _parked_wait(step: WorkflowStep) -> dict[str, Any]:
    """An approval (its id follows from the step) or a signal; `until` is the step's timer: the
    approval's deadline, the signal's timeout."""
    wait: dict[str, Any]
    if step.kind == StepKind.APPROVAL:
        wait = {
            "kind": WaitingKind.APPROVAL.value,
            "approval_id": str(approval_id_for(step.pk, step.attempt)),
        }
    else:
        wait = {"kind": WaitingKind.SIGNAL.value}
        if "data" not in step.get_deferred_fields():  # the admin list leaves step data out
            wait["signal"] = (step.data or {}).get("signal")
    if step.wake_at:
        wait["until"] = step.wake_at.isoformat()
    return wait


def get_run_timeline(run_id: Any) -> list[dict[str, Any]]:
    """`[{seq, at, step_key, attempt, event, ...}]`, in seq order; see `time_travel` for the keys."""
    pk = run_pk(run_id)
    if not WorkflowRun.objects.filter(pk=pk).exists():
        raise missing_run(run_id)
    return timeline_after(pk, -1)


def reconstruct_run_state(run_id: Any, at: Any = None) -> dict[str, Any]:
    """The run as it stood at `at` (a seq or a datetime, inclusive; default: the last event):
    `{seq, at, phase, steps: {key: {status, attempt, result, error}}, path, results}`."""
    pk = run_pk(run_id)
    status = WorkflowRun.objects.filter(pk=pk).values_list("status", flat=True).first()
    if status is None:
        raise missing_run(run_id)
    return state_at(timeline_after(pk, -1), at, run_status=status)


def last_event_seq(run_id: Any) -> int:
    """The seq of the run's last timeline event (-1: none yet)."""
    return last_seq(run_id)


def timeline_after(run_id: Any, seq: int) -> list[dict[str, Any]]:
    """The run's timeline events with a seq above `seq` (what a live stream has not sent)."""
    rows = read_events(run_id, after=seq)
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id)
    if seq >= 0:  # a stream's few new events: only their steps' attempts
        keys = {row["step_key"] for row in rows if row["step_key"] is not None}
        history = history.filter(step__step_key__in=keys)
    attempts = history.values("attempt", "result", "error").annotate(
        step_key=F("step__step_key"), from_step_key=F("step__from_step_key")
    )
    recorded = {(row["step_key"], row["attempt"]): row for row in attempts} if rows else {}
    return build_timeline(rows, recorded)
