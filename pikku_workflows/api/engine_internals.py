"""The engine internals the API uses beyond `import pikku_workflows as pw`, imported here only,
so that an engine rename is a one-line change: the start that says whether it created the run
(201 or 200), the summary builder (one run's summary from rows read in bulk, for the list, and
the step statuses it shows), the
operations table (each operation's function, permission and accepted statuses, as the admin and
the `pikku` command offer them too), the approvals' reads (one approval as a dict from
prefetched rows, and which approvals a user may decide or see, as the admin's inbox judges
them), which runs changed since a live event stream last read them, and a schedule row as the
dict `pw.get_schedule` answers (for the list, without reading each row again)."""

from __future__ import annotations

from ..engine.operations.approval_reads import approval_dict, approval_pk, decidable_by, visible_to
from ..engine.operations.control import OPERATION_RULES, Rule
from ..engine.operations.reads import SHOWN_STEP_STATUSES, summarize
from ..engine.operations.run_changes import RunMark, changed_runs
from ..engine.operations.runs import start_run
from ..engine.operations.schedules import schedule_dict

__all__ = [
    "OPERATION_RULES",
    "SHOWN_STEP_STATUSES",
    "Rule",
    "RunMark",
    "approval_dict",
    "approval_pk",
    "changed_runs",
    "decidable_by",
    "schedule_dict",
    "start_run",
    "summarize",
    "visible_to",
]
