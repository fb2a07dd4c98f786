"""Retention holds: `hold_run` keeps a run (and its tree) from every purge, whatever its age,
until it is released; audited like every operator action."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...exceptions import InvalidInput
from ...models import WorkflowAuditEntry, WorkflowRun
from ...querysets import DatabaseNow
from ...validation import REASON_MAX_LENGTH, checked_text
from .reads import get_run_status, missing_run, run_pk
from .users import checked_user

HOLD = "hold"
RELEASE = "release"
# The model permission (codename) holding and releasing need, wherever an adapter offers them.
HOLD_PERMISSION = "hold_workflowrun"


def hold_run(run_id: Any, *, hold: bool = True, reason: str = "", by: Any = None) -> dict[str, Any]:
    """Keep the run (and its tree) from every purge, whatever its age; `hold=False` releases
    it. Audited; holding a held run (or releasing a free one) writes nothing. Returns the run's
    status summary."""
    pk = run_pk(run_id)
    if not isinstance(hold, bool):
        raise InvalidInput("hold must be True or False.")
    checked_text(reason, "The reason", max_length=REASON_MAX_LENGTH, allow_empty=True)
    by = checked_user(by, "by")
    with transaction.atomic():
        changed = (
            WorkflowRun.objects.filter(pk=pk)
            .exclude(retention_hold=hold)
            .update(retention_hold=hold, updated_at=DatabaseNow())
        )
        if changed:
            WorkflowAuditEntry.objects.create(
                run_id=pk,
                action=HOLD if hold else RELEASE,
                user=by,
                reason=reason,
                payload={"retention_hold": hold},
            )
        elif not WorkflowRun.objects.filter(pk=pk).exists():
            raise missing_run(run_id)
    return get_run_status(pk)
