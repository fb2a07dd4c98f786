"""The engine's internal control-flow signals: raised through user code (a workflow body, a step
attempt) to stop it; BaseException subclasses, so a user's `except Exception:` cannot swallow
them. Not errors, never recorded: the `WorkflowError` family in `exceptions` is."""

from __future__ import annotations

from .exceptions import NonDeterministicReplay, WorkflowSuspended


class ControlFlowSignal(BaseException):
    """Stops user code (a workflow body, a step attempt); the engine decides what happens next."""


class RunParked(ControlFlowSignal):
    """The body waits for something outside this pass (a queued step, a timer, a child run)."""


class SuspendRequested(ControlFlowSignal):
    """The body's pass asks for the run to be suspended (`wf.suspend`, a missing step function):
    `reason` and `code` are what the suspended run records."""

    def __init__(self, reason: str, code: str = WorkflowSuspended.code) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class PassAbandoned(ControlFlowSignal):
    """One of the engine's own statements failed mid-body (the queue refused a message, a lock
    or statement timeout, a deadlock): the pass ends without judging the run, and the queue or
    recovery runs it again. `error` is what failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class ReplayDiverged(ControlFlowSignal):
    """Replay asked for another step than the one recorded at a key (`error`, a
    NonDeterministicReplay): a BaseException, so the body's `except Exception:` cannot carry on
    past it; the engine fails or suspends the run (ON_NON_DETERMINISM)."""

    def __init__(self, error: NonDeterministicReplay) -> None:
        super().__init__(str(error))
        self.error = error


class RunInterrupted(ControlFlowSignal):
    """The run stopped being this pass's to drive (cancelled, suspended, or its lease lost)."""


class TimeLimitAlarm(ControlFlowSignal):
    """Raised into a step function when its attempt's time limit passes, so the step's own
    `except Exception:` cannot keep the attempt alive; the attempt records StepTimedOut."""


class ContinueAsNew(ControlFlowSignal):
    """The body asks for its run to end `continued` and a successor run to go on with `input`
    (already storable JSON) from a fresh history (`wf.continue_as_new`)."""

    def __init__(self, input: object) -> None:
        super().__init__("continue as new")
        self.input = input
