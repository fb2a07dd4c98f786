"""What the stored run counts' tests share: the workflows their runs take and the counts read
from the runs themselves, to compare the stored ones with."""

from __future__ import annotations

from django.db.models import Count, Q

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.retention import register_shop


def register_counting_shop() -> None:
    """The retention shop's workflows, and `counts.napping`, a run that sleeps an hour."""
    register_shop()

    @pw.workflow("counts.napping")
    def napping(wf, input):
        wf.sleep("nap", "1h")


def counted_from_the_runs() -> dict[tuple[str, str, bool], int]:
    """Runs by (workflow, status, top level), counted with COUNT(*) ... GROUP BY."""
    rows = (
        WorkflowRun.objects.order_by()
        .annotate(top_level=Q(parent_run__isnull=True))
        .values_list("workflow", "status", "top_level")
        .annotate(n=Count("*"))
    )
    return {(workflow, status, bool(top_level)): n for workflow, status, top_level, n in rows}
