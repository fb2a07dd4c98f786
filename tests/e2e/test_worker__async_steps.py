"""Async step functions on a real `pikku_worker`: queued ones awaited on the worker that takes
each, in-process ones awaited together in the worker's pass, every outcome recorded
(docs/code-workflows.md, "Async step functions")."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def test_worker__runs_queued_and_in_process_async_steps(start_worker):
    worker = start_worker()
    run_id = pw.start_workflow("e2e.async_gather", {})

    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        30,
        "the run to end",
    )

    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"fetched": [0, 1, 2], "local": [0, 10, 20]},
    ), worker.log()
    steps = WorkflowStep.objects.filter(run_id=run_id)
    assert {(step.status, step.attempt) for step in steps} == {(StepStatus.SUCCEEDED, 1)}
    assert steps.count() == 6
