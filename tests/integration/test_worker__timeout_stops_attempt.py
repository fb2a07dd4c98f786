"""A queued step's `timeout` stops the attempt (an alarm in the worker's main thread raising an
exception `except Exception` cannot swallow): the attempt fails with TIMEOUT and follows the
retry policy, and nothing of it keeps running beside its retry."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import StepStatus
from tests.queue import drain_queue
from tests.rows import attempt_statuses

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished() -> list[str]:
    done: list[str] = []

    @pw.step_function("slowpoke.nap", inline=False, timeout="300ms")
    def nap(data: dict, ctx: pw.StepContext) -> str:
        try:
            time.sleep(1.5)
        except Exception:
            done.append("swallowed")  # a user's broad except must not keep the attempt alive
        done.append(f"attempt {ctx.attempt} finished")
        return "rested"

    @pw.workflow("slowpoke.flow")
    def flow(wf: pw.Workflow, input: dict) -> str:
        return wf.do("nap", "slowpoke.nap", {}, retries=1, retry_delay=0)

    return done


def test_timeout__stops_a_queued_attempt_and_records_timeout(finished, through_the_queue):
    assert threading.current_thread() is threading.main_thread()
    run_id = pw.start_workflow("slowpoke.flow", {})
    tasks.orchestrate(run_id)

    tasks.execute_step(run_id, "nap")

    time.sleep(1.5)
    assert finished == []  # nothing of the stopped attempt ran on
    step = WorkflowStep.objects.get(run_id=run_id, step_key="nap")
    assert (step.status, step.error["code"]) == (StepStatus.FAILED, "TIMEOUT")
    assert attempt_statuses(run_id, "nap") == [(1, StepStatus.FAILED)]


def test_timeout__stops_an_attempt_run_in_place_and_its_retry_goes_to_the_queue(finished):
    run_id = pw.start_workflow("slowpoke.flow", {})

    tasks.orchestrate(run_id)  # the pass runs the step in place: its timeout holds there too

    time.sleep(1.5)
    assert finished == []
    step = WorkflowStep.objects.get(run_id=run_id, step_key="nap")
    assert (step.status, step.error["code"]) == (StepStatus.FAILED, "TIMEOUT")
    assert attempt_dispatches(run_id) == [(1, "in_place")]
    drain_queue()  # the retry: through the queue, and timed out again
    assert attempt_dispatches(run_id) == [(1, "in_place"), (2, "queued")]
    assert WorkflowStep.objects.get(pk=step.pk).error["code"] == "TIMEOUT"


def attempt_dispatches(run_id: str) -> list[tuple[int, str]]:
    return list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id)
        .order_by("attempt")
        .values_list("attempt", "dispatch")
    )


def test_timeout__restores_the_alarm_that_was_armed_before(finished, through_the_queue):
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)  # django-q2's own timeout, say
        run_id = pw.start_workflow("slowpoke.flow", {})
        tasks.orchestrate(run_id)
        tasks.execute_step(run_id, "nap")

        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < remaining <= 30  # still armed, minus the time the step took
        assert fired == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
