"""The errors pikku_workflows raises and records, each a `WorkflowError` with a stable `code`.
The control-flow signals that stop a workflow body are not errors: they live in `control_flow`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any


class WorkflowError(Exception):
    """A workflow operation failed."""

    code = "WORKFLOW_ERROR"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class WorkflowNotFound(WorkflowError):
    """No workflow is registered under that name."""

    code = "WORKFLOW_NOT_FOUND"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"No workflow is registered under the name {name!r}.")


class RunNotFound(WorkflowError):
    """No workflow run has that id."""

    code = "RUN_NOT_FOUND"

    def __init__(self, run_id: object) -> None:
        self.run_id = run_id
        super().__init__(f"No workflow run has the id {run_id!s}.")


class RunPurged(RunNotFound):
    """The run was purged: only its tombstone is left."""

    code = "RUN_PURGED"

    def __init__(self, run_id: object) -> None:
        self.run_id = run_id
        WorkflowError.__init__(self, f"The workflow run {run_id!s} was purged (retention).")


class InvalidInput(WorkflowError):
    """The input is not valid."""

    code = "INVALID_INPUT"

    def __init__(self, message: str | None = None, *, problems: Sequence[str] = ()) -> None:
        # `problems` lists every problem found at once (a graph definition's validation);
        # a plain InvalidInput has its one message as its only problem.
        if message is None and problems:
            message = "\n".join(["The input is not valid:", *(f"- {p}" for p in problems)])
        super().__init__(message)
        self.problems: list[str] = list(problems) or [self.message]


class InvalidTransition(WorkflowError):
    """That status change is not allowed from the current status."""

    code = "INVALID_TRANSITION"

    def __init__(
        self, what: str, current: str | None, target: str, *, message: str | None = None
    ) -> None:
        self.current = current
        self.target = target
        super().__init__(message or f"Cannot move {what} from {current!r} to {target!r}.")


class _RunEnded(WorkflowError):
    def __init__(self, run_id: object, error: dict[str, Any] | None = None) -> None:
        self.run_id = run_id
        self.error = error or {}
        detail = self.error.get("message")
        super().__init__(f"Workflow run {run_id} {self._verb}" + (f": {detail}" if detail else "."))

    _verb = "ended"


class RunFailed(_RunEnded):
    """The workflow run failed."""

    code = "RUN_FAILED"
    _verb = "failed"


class RunCancelled(_RunEnded):
    """The workflow run was cancelled."""

    code = "RUN_CANCELLED"
    _verb = "was cancelled"


class RunSuspended(_RunEnded):
    """The workflow run is suspended until someone resumes it."""

    code = "RUN_SUSPENDED"
    _verb = "is suspended"


class RunTimeout(WorkflowError):
    """The workflow run did not finish within the timeout."""

    code = "RUN_TIMEOUT"

    def __init__(
        self, run_id: object, timeout: float, waiting_on: dict[str, Any] | None = None
    ) -> None:
        self.run_id = run_id
        self.waiting_on = waiting_on or {}
        what = " ".join(
            str(self.waiting_on[key]) for key in ("kind", "step_key") if self.waiting_on.get(key)
        )
        until = f" until {self.waiting_on['until']}" if self.waiting_on.get("until") else ""
        waits = f" (it waits on {what}{until})" if what else ""
        super().__init__(
            f"Workflow run {run_id} did not finish within {timeout:g} s{waits}: it goes on on a "
            "worker; pass timeout=None to wait for it, or in tests drain(run_id, advance=...)."
        )


class StepFailed(WorkflowError):
    """A step failed after spending all its attempts."""

    code = "STEP_FAILED"

    def __init__(self, step_key: str, error: dict[str, Any]) -> None:
        self.step_key = step_key
        self.error = error
        super().__init__(f"Step {step_key!r} failed: {error.get('message', '')}")


class IdempotencyConflict(WorkflowError):
    """A run with that idempotency key exists with a different input."""

    code = "IDEMPOTENCY_CONFLICT"

    def __init__(self, workflow: str, key: str) -> None:
        super().__init__(
            f"A {workflow!r} run with idempotency key {key!r} already exists with another input."
        )


class StepFunctionNotFound(WorkflowError):
    """No step function is registered under that name."""

    code = "RPC_NOT_FOUND"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"No step function is registered under the name {name!r}.")


class StepResultNotSerializable(WorkflowError):
    """A step returned a value that cannot be stored as JSON."""

    code = "STEP_RESULT_NOT_SERIALIZABLE"

    def __init__(self, step_key: str, reason: str) -> None:
        self.step_key = step_key
        super().__init__(f"Step {step_key!r} returned a value that is not storable JSON: {reason}")


class NonDeterministicReplay(WorkflowError):
    """The replayed body asked for a different step than the one recorded at that key."""

    code = "NON_DETERMINISTIC"

    def __init__(self, step_key: str, recorded: str | None, requested: str | None) -> None:
        self.step_key = step_key
        super().__init__(
            f"Replay asked for {requested!r} at step {step_key!r}, which recorded {recorded!r}: "
            "the workflow body is not deterministic."
        )


class InvalidDecisionData(InvalidInput):
    """The decision's data does not satisfy the approval's form."""

    def __init__(self, form: str, field_errors: dict[str, list[str]]) -> None:
        # `field_errors`: {field name (or "__all__"): [messages]}, as a Django form reports them.
        self.form = form
        self.field_errors = field_errors
        super().__init__(
            problems=[
                f"{field}: {message}"
                for field, messages in field_errors.items()
                for message in messages
            ]
        )


class ApprovalNotFound(WorkflowError):
    """No approval has that id."""

    code = "APPROVAL_NOT_FOUND"

    def __init__(self, approval_id: object) -> None:
        self.approval_id = approval_id
        super().__init__(f"No approval has the id {approval_id!s}.")


class ScheduleNotFound(WorkflowError):
    """No schedule has that name."""

    code = "SCHEDULE_NOT_FOUND"

    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(f"No schedule is named {name!s}.")


class ApprovalResolved(WorkflowError):
    """The approval was already decided."""

    code = "APPROVAL_RESOLVED"

    def __init__(
        self, message: str | None = None, *, approval_id: object = None, status: str | None = None
    ) -> None:
        self.approval_id = approval_id
        self.status = status
        super().__init__(message)


class ApprovalForbidden(WorkflowError):
    """You may not decide this approval."""

    code = "APPROVAL_FORBIDDEN"

    def __init__(
        self, message: str | None = None, *, approval_id: object = None, reason: str | None = None
    ) -> None:
        self.approval_id = approval_id
        self.reason = reason
        super().__init__(message)


class SignalForbidden(WorkflowError):
    """You may not send signals to this run."""

    code = "SIGNAL_FORBIDDEN"

    def __init__(self, message: str | None = None, *, run_id: object = None) -> None:
        self.run_id = run_id
        super().__init__(message)


class ApprovalExpired(WorkflowError):
    """Nobody decided the approval before its deadline, and it was set to fail the run."""

    code = "APPROVAL_EXPIRED"

    def __init__(self, step_key: str, approval_id: object = None) -> None:
        self.step_key = step_key
        self.approval_id = approval_id
        super().__init__(
            f"Approval {step_key!r} expired before anyone decided it (on_expire='fail')."
        )


class SignalTimeout(WorkflowError):
    """No signal arrived before the timeout."""

    code = "SIGNAL_TIMEOUT"

    def __init__(
        self, message: str | None = None, *, step_key: str | None = None, signal: str | None = None
    ) -> None:
        self.step_key = step_key
        self.signal = signal
        super().__init__(message)


class WorkflowDispatchException(WorkflowError):
    """The queue refused a message; the work stays pending and is dispatched again later."""

    code = "DISPATCH_FAILED"


class StepSuperseded(WorkflowError):
    """A newer attempt owns this step; the stale attempt's outcome is dropped."""

    code = "STEP_SUPERSEDED"

    def __init__(self, step_key: str, attempt: int) -> None:
        self.step_key = step_key
        self.attempt = attempt
        super().__init__(f"Attempt {attempt} of step {step_key!r} was superseded by a newer one.")


class StepTimedOut(WorkflowError):
    """A step attempt ran past its timeout and was stopped (the error its attempt records; the
    alarm that stops it is `control_flow.TimeLimitAlarm`)."""

    code = "TIMEOUT"

    def __init__(self, step_key: str, timeout_ms: int) -> None:
        self.step_key = step_key
        super().__init__(f"Step {step_key!r} exceeded its timeout of {timeout_ms} ms.")


class StepLeaseExpired(WorkflowError):
    """A step attempt's process stopped renewing its lease (killed, or cut off): the lease
    lapsed. Ends that attempt; on the step's last attempt it fails the step."""

    code = "STEP_LEASE_EXPIRED"

    def __init__(self, step_key: str, attempt: int, attempt_limit: int) -> None:
        self.step_key = step_key
        if attempt >= attempt_limit:
            then = f"it was the last attempt ({attempt} of {attempt_limit})"
        else:
            then = f"attempt {attempt + 1} of {attempt_limit} takes over"
        super().__init__(
            f"Step {step_key!r} attempt {attempt}: lease lapsed (its worker stopped renewing it: "
            f"killed, or cut off from the database); {then}."
        )


class ChildRunFailed(WorkflowError):
    """A child run failed, which fails the parent step's attempt."""

    code = "CHILD_RUN_FAILED"
    _verb = "failed"

    def __init__(self, child_run_id: object, message: str) -> None:
        self.child_run_id = child_run_id
        super().__init__(f"Child run {child_run_id} {self._verb}: {message}")


class ChildRunCancelled(ChildRunFailed):
    """A child run was cancelled, which fails the parent step's attempt."""

    code = "CHILD_RUN_CANCELLED"
    _verb = "cancelled"


class WorkflowSuspended(WorkflowError):
    """The run was suspended (by its body or an operator) until someone resumes it."""

    # Never raised: the reason recorded on a suspended run (its `type` is stored with the run,
    # so the name stays). A caller waiting on the run gets RunSuspended; a body that suspends
    # stops with control_flow.SuspendRequested.

    code = "WORKFLOW_SUSPENDED"


class WorkflowCancelled(WorkflowError):
    """The run was cancelled by an operator."""

    # Never raised: the reason recorded on a cancelled run; a caller waiting on it gets
    # RunCancelled.

    code = "WORKFLOW_CANCELLED"


class LimitNotFound(WorkflowError):
    """No limit is defined under that name (`pw.define_limit`)."""

    code = "LIMIT_NOT_FOUND"

    def __init__(self, name: str, owner: str = "") -> None:
        self.name = name
        named_by = f" (named by {owner!r})" if owner else ""
        super().__init__(f"No limit is defined under the name {name!r}{named_by}.")


class RateLimited(Exception):
    """Raised by step code when an upstream refuses for now (an HTTP 429): the attempt is
    recorded failed with RATE_LIMITED without spending a retry, and the step's limit keys close
    for every step behind them until `retry_after` has passed. Not a WorkflowError: the engine
    never raises it."""

    code = "RATE_LIMITED"

    def __init__(self, retry_after: int | str | timedelta | None = None, message: str = "") -> None:
        from .durations import parse_duration  # durations imports this module

        self.retry_after_ms = (
            None if retry_after is None else parse_duration(retry_after, what="retry_after")
        )
        super().__init__(message or "Rate limited by an upstream service.")


class ConcurrencySkipped(WorkflowError):
    """The run's concurrency key was full and its rule says `on_full="skip"`."""

    # Never raised: the reason recorded on the run cancelled at its start.

    code = "CONCURRENCY_SKIPPED"


class ConcurrencyReplaced(WorkflowError):
    """A newer run with the same concurrency key replaced this one (`on_full="replace"`)."""

    # Never raised: the reason recorded on the run it cancelled.

    code = "CONCURRENCY_REPLACED"


class CompensationFailed(WorkflowError):
    """A step that undoes a succeeded step (`compensate=`) spent its attempts: the run ends
    failed with this error (`cause`: what it was being undone for); `retry_run` retries the
    compensations."""

    code = "COMPENSATION_FAILED"

    def __init__(self, step_key: str, message: str) -> None:
        self.step_key = step_key
        super().__init__(f"Compensation {step_key!r} failed: {message}")


class WorkflowNotDeployed(WorkflowError):
    """The run's workflow is not registered in the process that picked the run up."""

    code = "WORKFLOW_NOT_FOUND"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Workflow {name!r} is not registered in this process; deploy it and resume."
        )


class StepFunctionNotDeployed(WorkflowError):
    """The step's function is not registered in the process that reached the step."""

    code = "RPC_NOT_FOUND"

    def __init__(self, name: str | None, step_key: str, close_names: Sequence[str] = ()) -> None:
        self.step_key = step_key
        guess = f"did you mean {' or '.join(map(repr, close_names))}? " if close_names else ""
        super().__init__(
            f"Step function {name!r} is not registered here (step {step_key!r}); {guess}"
            "deploy it (or fix the name) and resume the run."
        )


class OutputNotSerializable(WorkflowError):
    """The workflow returned a value that cannot be stored as JSON."""

    code = "OUTPUT_NOT_SERIALIZABLE"

    def __init__(self, reason: str) -> None:
        super().__init__(f"The workflow's output is not storable JSON: {reason}")


class VersionNotFound(WorkflowError):
    """The workflow version the run started on is not stored, so the run cannot go on."""

    code = "VERSION_NOT_FOUND"

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        super().__init__(
            f"Workflow {name!r} has no stored version {version!r}, which this run started on."
        )


class GraphRunFailed(WorkflowError):
    """A graph run cannot go on; `code` and `message` come from the planner's verdict, and
    `step_key` names the node instance it is about."""

    code = "GRAPH_RUN_FAILED"

    def __init__(self, failure: dict[str, Any]) -> None:
        self.code = failure["code"]
        self.step_key = failure.get("step_key")
        super().__init__(failure["message"])


class UpdateRejected(WorkflowError):
    """The workflow's validator refused the update; nothing was written."""

    code = "UPDATE_REJECTED"


class UpdateTimeout(WorkflowError):
    """The run did not answer the update in time; the update stays accepted."""

    code = "UPDATE_TIMEOUT"

    def __init__(self, message: str | None = None, *, update_id: str | None = None) -> None:
        self.update_id = update_id
        super().__init__(message)
