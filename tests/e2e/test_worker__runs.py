"""`pikku_worker` runs queued work: orchestrator passes and queued steps execute in its processes,
durable timers fire within a second or two (not django-q2's 30 s schedule cycle), and runs
started while no worker was up complete once one starts."""

from __future__ import annotations

import json
import os
import time

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.e2e.conftest import descendants
from tests.queue import queued_tasks

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

RUN_TIMEOUT = 20


def settled(run_ids: list[str]) -> list[WorkflowRun] | None:
    runs = list(WorkflowRun.objects.filter(pk__in=run_ids))
    if all(run.status != RunStatus.RUNNING for run in runs):
        return runs
    return None


def wait_for_runs(run_ids: list[str], timeout: float = RUN_TIMEOUT) -> list[WorkflowRun]:
    return wait_until(lambda: settled(run_ids), timeout, f"{len(run_ids)} runs to settle")


def test_worker__runs_queued_steps_in_its_processes(start_worker):
    worker = start_worker()

    run_id = pw.start_workflow("e2e.count", {"start": 40, "steps": 2})
    [run] = wait_for_runs([run_id])

    assert (run.status, run.error) == (RunStatus.COMPLETED, None)
    assert run.output["value"] == 42
    workers = descendants(worker.pid)
    assert os.getpid() not in run.output["pids"]
    assert set(run.output["pids"]) <= set(workers), (run.output["pids"], workers)
    steps = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    assert [(s.step_key, s.status, s.attempt) for s in steps] == [
        ("add", StepStatus.SUCCEEDED, 1),
        ("add#1", StepStatus.SUCCEEDED, 1),
    ]


def test_worker__a_one_second_sleep_completes_well_inside_the_schedule_cycle(start_worker):
    start_worker()

    started = time.monotonic()
    run_id = pw.start_workflow("e2e.nap", {"duration": "1s"})
    [run] = wait_for_runs([run_id])
    elapsed = time.monotonic() - started

    assert (run.status, run.output) == (RunStatus.COMPLETED, "rested")
    # Proves sub-minute timers (django-q2's Schedule fires every ~30 s); not a speed test.
    assert elapsed < 10
    nap = WorkflowStep.objects.get(run_id=run_id, step_key="nap")
    assert nap.status == StepStatus.SUCCEEDED
    assert (run.finished_at - run.created_at).total_seconds() >= 1  # it did sleep


def test_worker__runs_started_with_no_worker_complete_once_one_starts(start_worker):
    run_ids = [pw.start_workflow("e2e.count", {"start": n, "steps": 2}) for n in range(4)]
    assert {run.status for run in WorkflowRun.objects.filter(pk__in=run_ids)} == {RunStatus.RUNNING}
    assert len(queued_tasks()) == 4

    start_worker()
    runs = wait_for_runs(run_ids)

    assert {run.status for run in runs} == {RunStatus.COMPLETED}
    assert sorted(run.output["value"] for run in runs) == [2, 3, 4, 5]


def test_worker__a_step_longer_than_its_lease_keeps_it(start_worker, tmp_path):
    # The lease is 3 s and recovery looks for lapsed leases every second: only the heartbeat's
    # renewals keep a 5 s step from being re-claimed as a second attempt.
    log = tmp_path / "attempts.jsonl"
    start_worker()

    run_id = pw.start_workflow("e2e.crash", {"log": str(log), "seconds": 5})
    [run] = wait_for_runs([run_id])

    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 1})
    assert [json.loads(line)["attempt"] for line in log.read_text().splitlines()] == [1]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.SUCCEEDED, 1)
