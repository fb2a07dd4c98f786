"""A queued step's `timeout` on a real worker (django-q2's own alarm armed around the task):
each attempt is stopped where it runs, in place or from the queue, so its retry never runs
beside it and nothing of a stopped attempt runs on (docs/architecture.md §6)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

WORK_SECONDS = 2


def events(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    return [
        (line["attempt"], line["event"]) for line in map(json.loads, log.read_text().splitlines())
    ]


def test_worker__a_timed_out_attempt_stops_and_its_retry_runs_alone(start_worker, tmp_path):
    log = tmp_path / "attempts.jsonl"
    start_worker()
    run_id = pw.start_workflow("e2e.overrunning", {"log": str(log), "seconds": WORK_SECONDS})

    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        20,
        "both attempts to time out",
    )
    time.sleep(WORK_SECONDS + 0.5)  # long enough for a surviving attempt to finish its work

    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "STEP_FAILED")
    assert events(log) == [(1, "start"), (2, "start")]  # neither went on past its timeout
    attempts = WorkflowStepHistory.objects.filter(step__run_id=run_id).order_by("attempt")
    assert [(a.attempt, a.status, a.error["code"]) for a in attempts] == [
        (1, StepStatus.FAILED, "TIMEOUT"),
        (2, StepStatus.FAILED, "TIMEOUT"),
    ]
    assert [a.dispatch for a in attempts] == ["in_place", "queued"]
    # The retry ran only once the first attempt had been stopped and recorded failed.
    assert attempts[1].running_at >= attempts[0].failed_at
