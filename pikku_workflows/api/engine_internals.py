"""The engine internals the API uses beyond `import pikku_workflows as pw`, imported here only,
so that an engine rename is a one-line change: the start that says whether it created the run
(201 or 200), the summary builders (one run's summary from rows read in bulk, and a list item from its
row alone, and the step statuses a summary shows), the
operations table (each operation's function, permission and accepted statuses, as the admin and
the `pikku` command offer them too) and the retention holds' permission, the approvals' reads (one approval as a dict from
prefetched rows, and which approvals a user may decide or see, as the admin's inbox judges
them), which runs changed since a live event stream last read them, the timeline events after the
last one a stream sent, and a schedule row as the dict `pw.get_schedule` answers (for the list,
without reading each row again)."""

from __future__ import annotations

from ..engine.operations.approval_reads import approval_dict, approval_pk, decidable_by, visible_to
from ..engine.operations.control import OPERATION_RULES
from ..engine.operations.holds import HOLD, HOLD_PERMISSION, RELEASE
from ..engine.operations.limits import get_limit, list_limits, update_limit
from ..engine.operations.reads import (
    SHOWN_STEP_STATUSES,
    last_event_seq,
    list_rows,
    list_summary,
    summarize,
    timeline_after,
)
from ..engine.operations.rules import Rule
from ..engine.operations.run_changes import RunMark, changed_runs
from ..engine.operations.runs import start_run
from ..engine.operations.schedules import schedule_dict

__all__ = [
    "HOLD",
    "HOLD_PERMISSION",
    "OPERATION_RULES",
    "RELEASE",
    "SHOWN_STEP_STATUSES",
    "Rule",
    "RunMark",
    "approval_dict",
    "approval_pk",
    "changed_runs",
    "decidable_by",
    "get_limit",
    "last_event_seq",
    "list_limits",
    "list_rows",
    "list_summary",
    "schedule_dict",
    "start_run",
    "summarize",
    "timeline_after",
    "update_limit",
    "visible_to",
]
