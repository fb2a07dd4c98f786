"""Run, step and approval statuses, step kinds, the tables of allowed status changes and the
history timestamp each step status stamps (pure: no queries)."""

from __future__ import annotations

from django.db import models


class RunStatus(models.TextChoices):
    # Created, not yet admitted: a concurrency rule's slots are full (docs/flow-control.md).
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUSPENDED = "suspended", "Suspended"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # Ended by `wf.continue_as_new`: its successor run goes on from a fresh history.
    CONTINUED = "continued", "Continued"


class StepStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SCHEDULED = "scheduled", "Scheduled"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    WAITING = "waiting", "Waiting"


class StepKind(models.TextChoices):
    """What a step row records: a step function call, an inline callable, a child run, a timer,
    a suspension asked for by the body, an approval, a wait for a signal, or a patch marker
    (`wf.patched`: the run reached the patch on code that has it)."""

    FUNCTION = "function", "Step function"
    CALLABLE = "callable", "Callable"
    CHILD = "child", "Child run"
    SLEEP = "sleep", "Sleep"
    SUSPEND = "suspend", "Suspend"
    PATCH = "patch", "Patch marker"
    APPROVAL = "approval", "Approval"
    SIGNAL = "signal", "Signal"


class StepDispatch(models.TextChoices):
    """How an attempt reached the process that ran it (recorded on its history row)."""

    INLINE = "inline", "In the pass"  # an in-process step, or any step of an inline run
    IN_PLACE = "in_place", "In place on a worker"  # a queued step the worker's pass ran itself
    QUEUED = "queued", "Through the queue"


class Compensation(models.TextChoices):
    """Where undoing a run's succeeded steps stands (`compensate=`, docs/code-workflows.md)."""

    RUNNING = "running", "Compensating"
    COMPENSATED = "compensated", "Compensated"
    FAILED = "compensation_failed", "Compensation failed"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    # Its run was cancelled before anyone decided.
    CANCELLED = "cancelled", "Cancelled"


# The history row's column that records when an attempt reached each status.
HISTORY_TIMESTAMP: dict[str, str] = {
    StepStatus.PENDING: "created_at",
    StepStatus.SCHEDULED: "scheduled_at",
    StepStatus.RUNNING: "running_at",
    StepStatus.WAITING: "waiting_at",
    StepStatus.SUCCEEDED: "succeeded_at",
    StepStatus.FAILED: "failed_at",
}

TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CONTINUED}
)

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    # Admitted (running), or stopped by an operator before it ever ran.
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.SUSPENDED,
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.CONTINUED,
        }
    ),
    # A run suspended before it was admitted resumes into the queue it left.
    RunStatus.SUSPENDED: frozenset({RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.CANCELLED}),
    # retry_run gives a failed run a fresh attempt budget.
    RunStatus.FAILED: frozenset({RunStatus.RUNNING}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
    RunStatus.CONTINUED: frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    StepStatus.PENDING: frozenset(
        {StepStatus.SCHEDULED, StepStatus.RUNNING, StepStatus.WAITING, StepStatus.SUCCEEDED}
    ),
    # A scheduled sleep fires straight to succeeded; a queued step is claimed to running, or
    # handed back to pending (no attempt spent) by a worker that lacks its step function.
    StepStatus.SCHEDULED: frozenset({StepStatus.RUNNING, StepStatus.SUCCEEDED, StepStatus.PENDING}),
    # running -> running is a re-claim after a lapsed lease: a new attempt.
    StepStatus.RUNNING: frozenset(
        {StepStatus.RUNNING, StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.WAITING}
    ),
    StepStatus.WAITING: frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.RUNNING}),
    # A new attempt: claimed (running), re-armed by retry_run (pending), or a new child run (waiting).
    StepStatus.FAILED: frozenset({StepStatus.RUNNING, StepStatus.PENDING, StepStatus.WAITING}),
    StepStatus.SUCCEEDED: frozenset(),
}


# An approval is decided once: only a pending one moves, and nothing moves back.
APPROVAL_TRANSITIONS: dict[str, frozenset[str]] = {
    ApprovalStatus.PENDING: frozenset(
        {
            ApprovalStatus.APPROVED,
            ApprovalStatus.REJECTED,
            ApprovalStatus.EXPIRED,
            ApprovalStatus.CANCELLED,
        }
    ),
    ApprovalStatus.APPROVED: frozenset(),
    ApprovalStatus.REJECTED: frozenset(),
    ApprovalStatus.EXPIRED: frozenset(),
    ApprovalStatus.CANCELLED: frozenset(),
}


def run_can_move(current: str, target: str) -> bool:
    return target in RUN_TRANSITIONS.get(current, frozenset())


def step_can_move(current: str, target: str) -> bool:
    return target in STEP_TRANSITIONS.get(current, frozenset())


def run_sources(target: str) -> frozenset[str]:
    """The statuses a run may move to `target` from."""
    return frozenset(s for s, targets in RUN_TRANSITIONS.items() if target in targets)


def step_sources(target: str) -> frozenset[str]:
    """The statuses a step may move to `target` from."""
    return frozenset(s for s, targets in STEP_TRANSITIONS.items() if target in targets)


def approval_sources(target: str) -> frozenset[str]:
    """The statuses an approval may move to `target` from."""
    return frozenset(s for s, targets in APPROVAL_TRANSITIONS.items() if target in targets)
