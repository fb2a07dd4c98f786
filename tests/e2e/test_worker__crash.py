"""SIGKILL of a worker's main process during a slow queued step: none of its processes survive
(an orphan would keep renewing the lease), and a new worker finishes the run with attempt 2."""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.e2e.conftest import alive, descendants

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def attempts_logged(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_worker__sigkill_mid_step_leaves_no_orphans_and_a_new_worker_finishes(
    start_worker, tmp_path
):
    log = tmp_path / "attempts.jsonl"
    first = start_worker()
    run_id = pw.start_workflow("e2e.crash", {"log": str(log), "seconds": 60})
    [attempt_1] = wait_until(lambda: attempts_logged(log), 15, "the slow step to start")
    assert attempt_1["attempt"] == 1
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    tree = descendants(first.pid)  # sentinel, pusher, monitor, the two workers
    assert attempt_1["pid"] in tree, (attempt_1, tree)
    assert len(tree) >= 3

    first.kill_main()

    # Every forked process dies with its parent; an orphan would renew the step's lease forever.
    wait_until(lambda: not alive(tree), 5, f"the worker's children {alive(tree)} to die")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)  # nobody recorded anything

    start_worker()
    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        30,
        "the new worker to finish the run",
    )

    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, {"attempt": 2}, None)
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt, step.result) == (StepStatus.SUCCEEDED, 2, {"attempt": 2})
    history = WorkflowStepHistory.objects.filter(step=step).order_by("attempt")
    assert list(history.values_list("attempt", "status", "result")) == [
        (1, StepStatus.RUNNING, None),  # the killed attempt never recorded an outcome
        (2, StepStatus.SUCCEEDED, {"attempt": 2}),
    ]
    assert [entry["attempt"] for entry in attempts_logged(log)] == [1, 2]
    assert attempts_logged(log)[1]["pid"] not in tree


def test_worker__sigterm_to_its_process_group_releases_the_step_lease(start_worker, tmp_path):
    # A deploy (systemd stops the whole control group): the worker running the step hands its
    # lease back instead of leaving it to lapse, so the next worker re-claims it at once.
    log = tmp_path / "attempts.jsonl"
    worker = start_worker(PIKKU_STEP_LEASE_SECONDS="60")
    run_id = pw.start_workflow("e2e.crash", {"log": str(log), "seconds": 60})
    wait_until(lambda: attempts_logged(log), 15, "the slow step to start")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    assert step.lease_expires_at > timezone.now() + timedelta(seconds=30)
    tree = descendants(worker.pid)

    os.killpg(worker.pid, signal.SIGTERM)
    signalled = timezone.now()

    worker.process.wait(15)
    wait_until(lambda: not alive(tree), 5, f"the worker's children {alive(tree)} to exit")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    assert step.lease_expires_at <= timezone.now()
    assert step.lease_expires_at >= signalled - timedelta(seconds=1)

    # The next worker re-claims it at once, well before the 60 s lease would have lapsed.
    start_worker(PIKKU_STEP_LEASE_SECONDS="60")
    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        20,
        "the next worker to finish the run",
    )
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 2})
    assert [entry["attempt"] for entry in attempts_logged(log)] == [1, 2]
