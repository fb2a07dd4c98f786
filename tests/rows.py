"""Fresh reads of the rows a test checks after the engine acted."""

from __future__ import annotations

from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory


def load_run(run_id: str) -> WorkflowRun:
    return WorkflowRun.objects.get(pk=run_id)


def load_step(run_id: str, key: str) -> WorkflowStep:
    return WorkflowStep.objects.get(run_id=run_id, step_key=key)


def attempt_statuses(run_id: str, key: str) -> list[tuple]:
    """(attempt, status) of every history row of the step, in attempt order."""
    return list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
        .order_by("attempt")
        .values_list("attempt", "status")
    )
