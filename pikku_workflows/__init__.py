"""pikku_workflows: durable workflows for Django.

`import pikku_workflows as pw` from a `workflows.py` module: this package imports no models,
so the operations below import the engine lazily.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .approvals.policy import ApprovalOutcome
from .approvals.signals import (
    approval_decided,
    approval_expired,
    approval_reminder,
    approval_requested,
)
from .exceptions import (
    ApprovalExpired,
    ApprovalForbidden,
    ApprovalNotFound,
    ApprovalResolved,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    LimitNotFound,
    NonDeterministicReplay,
    RateLimited,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunPurged,
    RunSuspended,
    RunTimeout,
    ScheduleNotFound,
    SignalForbidden,
    SignalTimeout,
    StepFailed,
    StepFunctionNotFound,
    StepResultNotSerializable,
    StepSuperseded,
    UpdateRejected,
    UpdateTimeout,
    WorkflowDispatchException,
    WorkflowError,
    WorkflowNotFound,
)
from .flow import Concurrency, Debounce, Rate
from .registry import (
    define_limit,
    graph_workflow,
    graph_workflow_from_file,
    step_function,
    workflow,
)
from .schedules import Schedule, next_fire_times
from .updates import Update

if TYPE_CHECKING:
    from .engine.replay.attempts import StepContext
    from .engine.replay.gather import StepCall
    from .engine.replay.workflow import Workflow

_LAZY = {
    "Workflow": "pikku_workflows.engine.replay.workflow",
    "StepContext": "pikku_workflows.engine.replay.attempts",
    "StepCall": "pikku_workflows.engine.replay.gather",
    "start_workflow": "pikku_workflows.engine.operations.runs",
    "run_to_completion": "pikku_workflows.engine.operations.runs",
    "cancel_run": "pikku_workflows.engine.operations.control",
    "suspend_run": "pikku_workflows.engine.operations.control",
    "resume_run": "pikku_workflows.engine.operations.control",
    "retry_run": "pikku_workflows.engine.operations.control",
    "fork_run": "pikku_workflows.engine.operations.control",
    "get_run_timeline": "pikku_workflows.engine.operations.reads",
    "reconstruct_run_state": "pikku_workflows.engine.operations.reads",
    "get_run_status": "pikku_workflows.engine.operations.reads",
    "recover": "pikku_workflows.engine.operations.recovery",
    "decide_approval": "pikku_workflows.engine.operations.approvals",
    "reassign_approval": "pikku_workflows.engine.operations.approvals",
    "get_approval": "pikku_workflows.engine.operations.approval_reads",
    "send_signal": "pikku_workflows.engine.operations.signals",
    "purge_runs": "pikku_workflows.engine.operations.purge",
    "hold_run": "pikku_workflows.engine.operations.holds",
    "create_schedule": "pikku_workflows.engine.operations.schedules",
    "update_schedule": "pikku_workflows.engine.operations.schedules",
    "delete_schedule": "pikku_workflows.engine.operations.schedules",
    "get_schedule": "pikku_workflows.engine.operations.schedules",
    "pause_schedule": "pikku_workflows.engine.operations.schedules",
    "resume_schedule": "pikku_workflows.engine.operations.schedules",
    "trigger_schedule": "pikku_workflows.engine.operations.schedules",
    "backfill_schedule": "pikku_workflows.engine.operations.schedules",
    "update": "pikku_workflows.engine.operations.updates",
}


def __getattr__(name: str) -> Any:
    # The engine imports models; load it only when used, after apps are ready.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pikku_workflows' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "ApprovalExpired",
    "ApprovalForbidden",
    "ApprovalNotFound",
    "ApprovalOutcome",
    "ApprovalResolved",
    "Concurrency",
    "Debounce",
    "IdempotencyConflict",
    "InvalidInput",
    "InvalidTransition",
    "LimitNotFound",
    "NonDeterministicReplay",
    "Rate",
    "RateLimited",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "RunPurged",
    "RunSuspended",
    "RunTimeout",
    "Schedule",
    "ScheduleNotFound",
    "SignalForbidden",
    "SignalTimeout",
    "StepCall",
    "StepContext",
    "StepFailed",
    "StepFunctionNotFound",
    "StepResultNotSerializable",
    "StepSuperseded",
    "Update",
    "UpdateRejected",
    "UpdateTimeout",
    "Workflow",
    "WorkflowDispatchException",
    "WorkflowError",
    "WorkflowNotFound",
    "approval_decided",
    "approval_expired",
    "approval_reminder",
    "approval_requested",
    "backfill_schedule",
    "cancel_run",
    "create_schedule",
    "decide_approval",
    "define_limit",
    "delete_schedule",
    "fork_run",
    "get_approval",
    "get_run_status",
    "get_run_timeline",
    "get_schedule",
    "graph_workflow",
    "graph_workflow_from_file",
    "hold_run",
    "next_fire_times",
    "pause_schedule",
    "purge_runs",
    "reassign_approval",
    "reconstruct_run_state",
    "recover",
    "resume_run",
    "resume_schedule",
    "retry_run",
    "run_to_completion",
    "send_signal",
    "start_workflow",
    "step_function",
    "suspend_run",
    "trigger_schedule",
    "update",
    "update_schedule",
    "workflow",
]
