"""Lost queue messages (what a rotated SECRET_KEY or a renamed cluster does silently): the
worker's recovery relays the work from the pikku tables and the runs complete."""

from __future__ import annotations

import time

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

RUN_TIMEOUT = 30


def all_completed(run_ids: list[str]) -> list[WorkflowRun] | None:
    runs = list(WorkflowRun.objects.filter(pk__in=run_ids))
    if any(run.status == RunStatus.RUNNING for run in runs):
        return None
    return runs


def test_worker__relays_runs_whose_messages_were_all_lost(start_worker):
    # Two runs lost their step's message (dispatched: step scheduled), two their start message.
    dispatched = [pw.start_workflow("e2e.count", {"start": n, "steps": 2}) for n in (0, 10)]
    for run_id in dispatched:
        orchestrate(run_id)
    unstarted = [pw.start_workflow("e2e.count", {"start": n, "steps": 2}) for n in (20, 30)]
    assert {step.status for step in WorkflowStep.objects.filter(run_id__in=dispatched)} == {
        StepStatus.SCHEDULED
    }
    deleted, _ = OrmQ.objects.all().delete()
    assert deleted == 6  # 4 start passes, 2 step executions

    start_worker()
    runs = wait_until(
        lambda: all_completed(dispatched + unstarted), RUN_TIMEOUT, "recovery to relay the runs"
    )

    assert {run.status for run in runs} == {RunStatus.COMPLETED}
    assert sorted(run.output["value"] for run in runs) == [2, 12, 22, 32]
    steps = WorkflowStep.objects.filter(run_id__in=dispatched + unstarted)
    assert {(step.status, step.attempt) for step in steps} == {(StepStatus.SUCCEEDED, 1)}


def test_worker__relays_messages_deleted_while_runs_are_in_flight(start_worker):
    start_worker()
    # Steps long enough (4 runs x 3 x 0.6 s on 2 worker processes) for the runs to be still in
    # flight when the deleting stops: an idle worker takes a new message within milliseconds.
    run_ids = [
        pw.start_workflow("e2e.count", {"start": n * 10, "steps": 3, "seconds": 0.6})
        for n in range(4)
    ]

    # Once the runs are under way, keep deleting every queued message for a while.
    wait_until(
        lambda: WorkflowStep.objects.filter(run_id__in=run_ids).exists(), 10, "the runs to start"
    )
    lost = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        lost += OrmQ.objects.all().delete()[0]
        time.sleep(0.05)
    assert lost > 0
    assert WorkflowRun.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING).exists()

    runs = wait_until(lambda: all_completed(run_ids), RUN_TIMEOUT, "recovery to relay the runs")

    assert {run.status for run in runs} == {RunStatus.COMPLETED}
    assert sorted(run.output["value"] for run in runs) == [3, 13, 23, 33]
    steps = WorkflowStep.objects.filter(run_id__in=run_ids)
    assert steps.count() == 12
    assert {step.status for step in steps} == {StepStatus.SUCCEEDED}
