"""Durable timers: a due sleep or retry backoff is fired by the timer loop, which dispatches the
work waiting on it (docs/architecture.md §6, §8)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.operations.recovery import run_timer_loop
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.replay_pass import ReplayPass
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"
# Long enough that the start and the queue's drain end before it on a busy machine: the tests
# check the timer is not due yet first.
DELAY = "1s"


def step_of(run_id: str, key: str) -> WorkflowStep:
    return WorkflowStep.objects.get(run_id=run_id, step_key=key)


def is_due(run_id: str, key: str) -> Callable[[], bool]:
    return lambda: WorkflowStep.objects.due().filter(run_id=run_id, step_key=key).exists()


@pytest.fixture
def attempts() -> list[int]:
    """Workflows `timer.nap` (a short sleep) and `timer.flaky[_inline]` (a step failing once,
    retried after a short backoff); returns the attempts the flaky function ran."""
    seen: list[int] = []

    def flaky(data: dict, ctx: pw.StepContext) -> dict:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"attempt": ctx.attempt}

    pw.step_function("timer.flaky_queued", inline=False)(flaky)
    pw.step_function("timer.flaky_in_process")(flaky)

    @pw.workflow("timer.nap")
    def nap(wf: pw.Workflow, input: dict) -> str:
        wf.sleep("nap", DELAY)
        return "rested"

    @pw.workflow("timer.flaky")
    def flaky_workflow(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("flaky", input["function"], {}, retries=2, retry_delay=DELAY)

    return seen


def test_fire_due_timers__a_due_sleep_resumes_the_run(attempts):
    run_id = pw.start_workflow("timer.nap")
    drain_queue()
    nap = step_of(run_id, "nap")
    assert (nap.status, nap.wake_at is not None) == (StepStatus.SCHEDULED, True)

    assert fire_due_timers() == 0  # not due yet
    assert queued_tasks() == []
    wait_until(is_due(run_id, "nap"))
    assert fire_due_timers() == 1

    nap = step_of(run_id, "nap")
    assert (nap.status, nap.wake_at) == (StepStatus.SUCCEEDED, None)
    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]
    assert fire_due_timers() == 0  # fired once
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "rested")


def test_fire_due_timers__a_due_retry_dispatches_the_queued_step(attempts):
    run_id = pw.start_workflow("timer.flaky", {"function": "timer.flaky_queued"})
    drain_queue()
    flaky = step_of(run_id, "flaky")
    assert (flaky.status, flaky.attempt, flaky.wake_at is not None) == (StepStatus.FAILED, 1, True)
    assert queued_tasks() == []  # the retry waits on its timer, not on a message

    tasks.execute_step(run_id, "flaky")  # an early duplicate message: the backoff holds
    assert step_of(run_id, "flaky").attempt == 1
    assert fire_due_timers() == 0
    wait_until(is_due(run_id, "flaky"))
    assert fire_due_timers() == 1

    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "flaky"))]
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 2})
    assert attempts == [1, 2]
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id).order_by("attempt")
    assert list(history.values_list("attempt", "status")) == [
        (1, StepStatus.FAILED),
        (2, StepStatus.SUCCEEDED),
    ]


def test_fire_due_timers__a_due_retry_of_an_in_process_step_resumes_the_pass(attempts):
    run_id = pw.start_workflow("timer.flaky", {"function": "timer.flaky_in_process"})
    drain_queue()
    flaky = step_of(run_id, "flaky")
    assert (flaky.status, flaky.attempt) == (StepStatus.FAILED, 1)

    wait_until(is_due(run_id, "flaky"))
    assert fire_due_timers() == 1

    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 2})
    assert attempts == [1, 2]


def test_run_timer_loop__fires_a_sleep_without_being_asked(attempts, fresh_backoff):
    run_id = pw.start_workflow("timer.nap")
    drain_queue()
    stop = threading.Event()
    crashed: list[BaseException] = []

    def loop() -> None:
        try:
            run_timer_loop(stop)
        except BaseException as exc:
            crashed.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="test-timer-loop", daemon=True)
    thread.start()
    try:
        wait_until(lambda: step_of(run_id, "nap").status == StepStatus.SUCCEEDED)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive() and not crashed, crashed

    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_fire_due_timers__racing_a_pass_that_ends_the_same_sleep(attempts, monkeypatch):
    # A pass (any message: a duplicate, a rerun) replays a due sleep while the timer loop, in
    # another process, fires it: whichever ends the sleep first, the run goes on.
    run_id = pw.start_workflow("timer.nap")
    drain_queue()
    wait_until(is_due(run_id, "nap"))
    real_begin = ReplayPass.begin
    fired: list[int] = []

    def begin_while_the_timer_fires(*args, **kwargs):
        replay = real_begin(*args, **kwargs)  # the pass has read the sleep: scheduled, due
        fired.append(fire_due_timers())  # ...and the timer loop ends it meanwhile
        return replay

    monkeypatch.setattr(ReplayPass, "begin", begin_while_the_timer_fires)
    tasks.orchestrate(run_id)
    monkeypatch.undo()

    assert fired == [1]
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, "rested", None)
