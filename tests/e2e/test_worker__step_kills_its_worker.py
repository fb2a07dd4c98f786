"""An in-process step that SIGKILLs the worker running it, every time: each death costs one
attempt (its lease lapses, recovery hands the run to a live worker process), and on the last
attempt the step fails with STEP_LEASE_EXPIRED and the run fails; it never loops for ever"""

from __future__ import annotations

import json
from pathlib import Path

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


def test_worker__a_step_that_kills_its_worker_spends_its_attempts_then_fails(
    start_worker, tmp_path
):
    log = tmp_path / "attempts.jsonl"
    start_worker(PIKKU_RUN_LEASE_SECONDS="3")  # the dead pass held the run lease too

    run_id = pw.start_workflow("e2e.doomed", {"log": str(log)})

    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        45,
        "the run to end",
    )
    assert run.status == RunStatus.FAILED
    step = WorkflowStep.objects.get(run_id=run_id, step_key="die")
    assert (step.status, step.attempt, step.attempt_limit) == (StepStatus.FAILED, 2, 2)
    assert step.error["code"] == "STEP_LEASE_EXPIRED"
    attempts = [json.loads(line)["attempt"] for line in Path(log).read_text().splitlines()]
    assert attempts == [1, 2]
