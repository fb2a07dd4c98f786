"""The app's models, one module per concept; imported here so Django and callers find them."""

from .approvals import WorkflowApproval, WorkflowApprovalDecision
from .deployments import WorkflowVersion, WorkflowWorker
from .flow_control import WorkflowLimit, WorkflowRate, WorkflowSlot, WorkflowSlotCount
from .history import WorkflowAuditEntry, WorkflowEvent
from .messages import WorkflowSignal, WorkflowUpdate
from .retention import WorkflowRunTombstone
from .run_counts import WorkflowRunCount, WorkflowRunCountChange
from .runs import WorkflowRun, WorkflowStep, WorkflowStepHistory
from .schedules import (
    WorkflowBackfill,
    WorkflowSchedule,
    WorkflowScheduleAuditEntry,
    WorkflowScheduleTick,
)

__all__ = [
    "WorkflowApproval",
    "WorkflowApprovalDecision",
    "WorkflowAuditEntry",
    "WorkflowBackfill",
    "WorkflowEvent",
    "WorkflowLimit",
    "WorkflowRate",
    "WorkflowRun",
    "WorkflowRunCount",
    "WorkflowRunCountChange",
    "WorkflowRunTombstone",
    "WorkflowSchedule",
    "WorkflowScheduleAuditEntry",
    "WorkflowScheduleTick",
    "WorkflowSignal",
    "WorkflowSlot",
    "WorkflowSlotCount",
    "WorkflowStep",
    "WorkflowStepHistory",
    "WorkflowUpdate",
    "WorkflowVersion",
    "WorkflowWorker",
]
