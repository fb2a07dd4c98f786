"""Which runs changed since a reader last looked, for live views that follow many runs at once
(the API's event streams): one query for any number of runs.

A run's mark is what changes whenever its timeline does: its status and last write, its steps'
count and last write, its last audit entry (every run and step write sets `updated_at`). Marks
are compared for equality only; a reader that finds a run changed reads it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping

from django.db.models import Count, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce

from ...models import WorkflowAuditEntry, WorkflowRun, WorkflowStep

# What a reader holds for a run: None when it has no mark (or the run is gone).
RunMark = Hashable | None


def changed_runs(since: Mapping[uuid.UUID, RunMark]) -> dict[uuid.UUID, RunMark]:
    """The runs of `since` whose mark is no longer the one given, each with its mark now (None:
    the run is gone); a run given without a mark is returned with its mark, if it exists."""
    steps = WorkflowStep.objects.filter(run_id=OuterRef("pk")).order_by().values("run_id")
    audit = WorkflowAuditEntry.objects.filter(run_id=OuterRef("pk")).order_by()
    rows = (
        WorkflowRun.objects.filter(pk__in=list(since))
        .order_by()
        .annotate(
            steps_changed=Subquery(steps.annotate(last=Max("updated_at")).values("last")),
            step_count=Coalesce(Subquery(steps.annotate(n=Count("pk")).values("n")), 0),
            last_audit=Subquery(audit.values("run_id").annotate(last=Max("id")).values("last")),
        )
        .values_list("pk", "status", "updated_at", "steps_changed", "step_count", "last_audit")
    )
    now: dict[uuid.UUID, RunMark] = dict.fromkeys(since)
    for pk, *mark in rows:
        now[pk] = tuple(mark)
    return {pk: mark for pk, mark in now.items() if mark != since[pk]}
