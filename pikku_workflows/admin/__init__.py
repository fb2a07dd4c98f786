"""The pikku_workflows admin: runs (list, run page, operator actions, starting a run), the
approvals inbox, versions, the audit log, the workers, named limits, the tombstones of purged runs, and `WorkflowRunInline` for a host
model's own admin.

Only the engine writes runs and steps: nothing here can add, edit or delete them, and operator
actions call the engine's operations.
"""

from __future__ import annotations

from ..querysets import run_id_query
from .actions import OPERATIONS, Operation, RunOperationsAdmin
from .approvals import WorkflowApprovalAdmin
from .display import format_duration
from .limits import WorkflowLimitAdmin
from .records import (
    ReadOnlyAdminMixin,
    WorkflowAuditEntryAdmin,
    WorkflowRunInline,
    WorkflowVersionAdmin,
)
from .retention import RunHoldsAdmin, WorkflowRunTombstoneAdmin
from .runs import WorkflowRunAdmin
from .schedules import WorkflowScheduleAdmin
from .start import StartRunAdmin
from .workers import WorkflowWorkerAdmin

__all__ = [
    "OPERATIONS",
    "Operation",
    "ReadOnlyAdminMixin",
    "RunHoldsAdmin",
    "RunOperationsAdmin",
    "StartRunAdmin",
    "WorkflowApprovalAdmin",
    "WorkflowAuditEntryAdmin",
    "WorkflowLimitAdmin",
    "WorkflowRunAdmin",
    "WorkflowRunInline",
    "WorkflowRunTombstoneAdmin",
    "WorkflowScheduleAdmin",
    "WorkflowVersionAdmin",
    "WorkflowWorkerAdmin",
    "format_duration",
    "run_id_query",
]
