"""The workflow `bench/schedules.py`'s schedules start (loaded through
PIKKU_EXTRA_WORKFLOW_MODULES=bench.schedule_workflows); no worker runs it during the bench."""

from __future__ import annotations

import pikku_workflows as pw

WORKFLOW = "bench.scheduled_report"


@pw.workflow(WORKFLOW)
def scheduled_report(wf: pw.Workflow, input: dict) -> dict:
    return {"scheduled_for": str(wf.scheduled_for)}
