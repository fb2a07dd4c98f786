"""pikku_workflows: durable workflows for Django.

`import pikku_workflows as pw` from a `workflows.py` module: this package imports no models,
so the operations below import the engine lazily.
"""

from __future__ import annotations

from .exceptions import (
    ApprovalForbidden,
    ApprovalResolved,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    NonDeterministicReplay,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunSuspended,
    RunTimeout,
    SignalTimeout,
    StepFailed,
    StepFunctionNotFound,
    StepResultNotSerializable,
    StepSuperseded,
    WorkflowDispatchException,
    WorkflowError,
    WorkflowNotFound,
)
from .registry import step_function, workflow

__all__ = [
    "ApprovalForbidden",
    "ApprovalResolved",
    "IdempotencyConflict",
    "InvalidInput",
    "InvalidTransition",
    "NonDeterministicReplay",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "RunSuspended",
    "RunTimeout",
    "SignalTimeout",
    "StepFailed",
    "StepFunctionNotFound",
    "StepResultNotSerializable",
    "StepSuperseded",
    "WorkflowDispatchException",
    "WorkflowError",
    "WorkflowNotFound",
    "step_function",
    "workflow",
]
