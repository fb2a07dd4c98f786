"""A broker that refuses messages is transient: the step stays pending, the run stays running,
nothing fails; once the broker is back, recovery relays the work and the run completes
(docs/architecture.md §3 and §4, reference trap 6 "dispatch failure treated as run failure lost runs")."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """These tests are about the queue path: no step runs in place."""


NOTHING = {
    "timers": 0,
    "lapsed": 0,
    "relayed": 0,
    "lapsed_runs": 0,
    "stalled": 0,
    "admitted": 0,
    "schedules": 0,
    "backfills": 0,
}


class Broker:
    """A fault point in front of django-q2's enqueue: while `down`, every enqueue raises."""

    def __init__(self) -> None:
        self.down = False
        self.refused = 0


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    import django_q.tasks

    state = Broker()
    real_async_task = django_q.tasks.async_task

    def async_task(*args, **kwargs):
        if state.down:
            state.refused += 1
            raise OSError("broker unreachable")
        return real_async_task(*args, **kwargs)

    # dispatch._enqueue imports async_task on each call: its error handling is exercised too.
    monkeypatch.setattr(django_q.tasks, "async_task", async_task)
    yield state


@pytest.fixture
def ran() -> list[int]:
    attempts: list[int] = []

    @pw.step_function("dsp.charge", inline=False)
    def charge(data: dict, ctx: pw.StepContext) -> dict:
        attempts.append(ctx.attempt)
        if ctx.attempt <= data.get("fail_first", 0):
            raise RuntimeError("declined")
        return {"charged": data["amount"]}

    @pw.workflow("dsp.order")
    def order(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("charge", "dsp.charge", input, retries=2, retry_delay="200ms")

    return attempts


def recover(**settings: float) -> dict[str, int]:
    with override_settings(PIKKU_WORKFLOWS=settings):
        return pw.recover()


def nothing_failed(run_id: str) -> None:
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error, run.output) == (RunStatus.RUNNING, None, None)
    assert not WorkflowStepHistory.objects.filter(
        step__run_id=run_id, status=StepStatus.FAILED
    ).exists()


def completed(run_id: str) -> WorkflowRun:
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error) == (RunStatus.COMPLETED, None)
    return run


def test_dispatch_failure__the_step_stays_pending_and_the_run_running(broker, ran, fresh_backoff):
    run_id = pw.start_workflow("dsp.order", {"amount": 5})
    broker.down = True

    tasks.orchestrate(run_id)  # the start message's pass: the step cannot be dispatched

    assert broker.refused == 1
    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.status, step.attempt, step.error) == (StepStatus.PENDING, 1, None)
    nothing_failed(run_id)
    assert ran == []
    assert recover(RELAY_PENDING_AFTER_SECONDS=0)["relayed"] == 0  # still down: nothing sent
    nothing_failed(run_id)


def test_dispatch_failure__once_the_broker_is_back_recovery_completes_the_run(
    broker, ran, fresh_backoff
):
    run_id = pw.start_workflow("dsp.order", {"amount": 5})
    broker.down = True
    tasks.orchestrate(run_id)
    broker.down = False

    assert recover(RELAY_PENDING_AFTER_SECONDS=0)["relayed"] == 1
    drain_queue()

    assert completed(run_id).output == {"charged": 5}
    assert ran == [1]


def test_dispatch_failure__at_start_the_run_is_recorded_and_resumed_later(
    broker, ran, fresh_backoff
):
    broker.down = True

    run_id = pw.start_workflow("dsp.order", {"amount": 5})  # never raises for the queue

    nothing_failed(run_id)
    assert queued_tasks() == []
    broker.down = False
    assert recover(STALLED_RUN_AFTER_SECONDS=0) == {**NOTHING, "stalled": 1}
    drain_queue()
    assert completed(run_id).output == {"charged": 5}


def test_dispatch_failure__a_fired_retry_is_relayed_when_the_broker_is_back(
    broker, ran, fresh_backoff
):
    run_id = pw.start_workflow("dsp.order", {"amount": 5, "fail_first": 1})
    drain_queue()
    assert WorkflowStep.objects.get(run_id=run_id, step_key="charge").status == StepStatus.FAILED
    broker.down = True

    deadline = time.monotonic() + 10
    while not fire_due_timers():  # fires, but the step's message cannot be sent
        assert time.monotonic() < deadline, "the retry never came due"
        time.sleep(0.02)

    assert broker.refused == 1
    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    broker.down = False
    assert recover(RELAY_PENDING_AFTER_SECONDS=0)["relayed"] == 1
    drain_queue()
    assert completed(run_id).output == {"charged": 5}
    assert ran == [1, 2]


def test_dispatch_failure__after_a_step_succeeded_the_stalled_sweep_resumes(
    broker, ran, fresh_backoff
):
    run_id = pw.start_workflow("dsp.order", {"amount": 5})
    tasks.orchestrate(run_id)
    broker.down = True

    # A worker outside the orchestrators' cluster sends the pass rather than running it here.
    with override_settings(PIKKU_WORKFLOWS={"ORCHESTRATOR_QUEUE": "orchestrators"}):
        tasks.execute_step(run_id, "charge")  # the result is recorded; the pass is not sent

    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.status, step.result) == (StepStatus.SUCCEEDED, {"charged": 5})
    nothing_failed(run_id)
    broker.down = False
    assert recover(STALLED_RUN_AFTER_SECONDS=0)["stalled"] == 1
    drain_queue()
    assert completed(run_id).output == {"charged": 5}
    assert ran == [1]


def test_dispatch_failure__a_worker_of_the_orchestrators_cluster_continues_in_place(
    broker, ran, fresh_backoff
):
    run_id = pw.start_workflow("dsp.order", {"amount": 5})
    tasks.orchestrate(run_id)
    broker.down = True

    tasks.execute_step(run_id, "charge")  # records the result and runs the pass: nothing to send

    assert broker.refused == 0
    assert completed(run_id).output == {"charged": 5}
