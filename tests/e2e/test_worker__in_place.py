"""Queued steps run in place on real workers, through crashes and deploys: kill -9 of a worker's
whole process group, again and again, loses no run, re-runs at most the steps in flight, and
every recorded result comes from the attempt that claimed the step; a SIGTERM lets the running
step finish and hands the next one to the queue."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

RUNS = 6
STEPS = 12
KILLS = 3


def executions(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def all_ended(run_ids: list[str]) -> bool:
    return not WorkflowRun.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING).exists()


def test_in_place__kill_9_of_the_worker_group_again_and_again_loses_nothing(start_worker, tmp_path):
    log = tmp_path / "executions.jsonl"
    worker = start_worker()
    input = {"log": str(log), "seconds": 0.1, "steps": STEPS}
    run_ids = [pw.start_workflow("e2e.ticks", input) for _ in range(RUNS)]

    for kill in range(KILLS):
        wait_until(lambda n=kill: len(executions(log)) >= (n + 1) * 8, 30, "steps to run")
        worker.kill_group()
        worker = start_worker()
    wait_until(lambda: all_ended(run_ids), 90, "every run to end")

    runs = WorkflowRun.objects.filter(pk__in=run_ids)
    assert sorted(run.status for run in runs) == [RunStatus.COMPLETED] * RUNS
    steps = WorkflowStep.objects.filter(run_id__in=run_ids)
    assert steps.count() == RUNS * STEPS
    for step in steps:
        # The recorded result is the one of the attempt that owns the step: no stale write won.
        assert step.result == {"attempt": step.attempt}, step
    runs_of = Counter((line["run_id"], line["step_key"]) for line in executions(log))
    reruns = sum(count - 1 for count in runs_of.values())
    assert max(runs_of.values()) <= 2  # a step is re-run once at most (it was in flight)
    assert reruns <= KILLS * 2  # no more than the steps in flight at the kills (2 processes)
    in_place = WorkflowStepHistory.objects.filter(step__run_id__in=run_ids, dispatch="in_place")
    assert in_place.count() > RUNS * STEPS / 2  # most steps ran in place


def test_in_place__sigterm_lets_the_running_step_finish_and_queues_the_next(start_worker, tmp_path):
    log = tmp_path / "executions.jsonl"
    worker = start_worker()
    run_id = pw.start_workflow("e2e.ticks", {"log": str(log), "seconds": 0.6, "steps": 8})
    wait_until(lambda: len(executions(log)) >= 3, 30, "three steps to start")

    worker.terminate_group()

    ran = executions(log)
    last = ran[-1]["step_key"]
    running = WorkflowStep.objects.get(run_id=run_id, step_key=last)
    assert (running.status, running.attempt) == (StepStatus.SUCCEEDED, 1)  # it finished
    after = WorkflowStep.objects.filter(run_id=run_id, step_key=f"t{int(last[1:]) + 1}").first()
    assert after is not None and after.status == StepStatus.SCHEDULED  # handed to the queue
    assert WorkflowStepHistory.objects.get(step=after, attempt=1).dispatch == "queued"

    start_worker()
    wait_until(lambda: all_ended([run_id]), 60, "the run to finish on the new worker")
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert Counter(line["step_key"] for line in executions(log)) == Counter(
        f"t{i}" for i in range(8)
    )  # nothing ran twice


def test_in_place__kill_9_between_a_step_and_the_write_of_its_result_reruns_it_once(
    start_worker, tmp_path
):
    # One commit per step: a step's result is written with the next step's creation. A kill in
    # between loses that result only; the step runs once more, and nothing else is lost.
    log = tmp_path / "executions.jsonl"
    worker = start_worker(PIKKU_IN_PLACE_MAX_SECONDS="60")  # the whole run in place, one pass
    run_id = pw.start_workflow("e2e.pondering", {"log": str(log), "steps": 6, "think": 0.4})
    wait_until(lambda: len(executions(log)) >= 3, 30, "three steps to run")

    worker.kill_group()  # the body is thinking: the last step's result is in memory only
    killed_at = len(executions(log))
    start_worker()
    wait_until(lambda: all_ended([run_id]), 60, "the run to finish on the new worker")

    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    runs_of = Counter(line["step_key"] for line in executions(log))
    assert set(runs_of) == {f"p{i}" for i in range(6)}
    assert max(runs_of.values()) == 2  # the step whose result the kill lost ran once more
    assert [key for key, count in runs_of.items() if count == 2] == [f"p{killed_at - 1}"]
    for step in WorkflowStep.objects.filter(run_id=run_id):
        assert step.result == {"attempt": step.attempt}
