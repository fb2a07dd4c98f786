"""Errors raised by pikku_workflows, each with a stable `code`, plus the control-flow signals
that stop a workflow body (those subclass BaseException so `except Exception:` can't swallow them)."""

from __future__ import annotations

from collections.abc import Sequence
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

    def __init__(self, what: str, current: str | None, target: str) -> None:
        self.current = current
        self.target = target
        super().__init__(f"Cannot move {what} from {current!r} to {target!r}.")


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

    def __init__(self, run_id: object, timeout: float) -> None:
        self.run_id = run_id
        super().__init__(f"Workflow run {run_id} did not finish within {timeout} s.")


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


class ApprovalResolved(WorkflowError):
    """The approval was already decided."""

    code = "APPROVAL_RESOLVED"


class ApprovalForbidden(WorkflowError):
    """You may not decide this approval."""

    code = "APPROVAL_FORBIDDEN"


class SignalTimeout(WorkflowError):
    """No signal arrived before the timeout."""

    code = "SIGNAL_TIMEOUT"


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


class WorkflowSignal(BaseException):
    """Stops the workflow body; the orchestrator decides what the run does next."""


class RunParked(WorkflowSignal):
    """The body waits for something outside this pass (a queued step, a timer, a child run)."""


class RunSuspendedSignal(WorkflowSignal):
    """The body suspended the run (`wf.suspend`, a missing step function)."""

    def __init__(self, reason: str, code: str = "WORKFLOW_SUSPENDED") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class DispatchFailed(WorkflowSignal):
    """A queue refused a message mid-body; the pass ends and the queue delivers it again."""

    def __init__(self, error: WorkflowDispatchException) -> None:
        super().__init__(str(error))
        self.error = error


class RunInterrupted(WorkflowSignal):
    """The run stopped being this pass's to drive (cancelled, suspended, or its lease lost)."""
