"""`timeout` bounds each attempt of a queued step: the attempt fails with TIMEOUT and follows the
retry policy; the late outcome of the abandoned attempt is never recorded (docs/architecture.md §6)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class Stuck:
    """The step function's first attempt hangs until released (Python cannot kill a thread)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.attempts: list[int] = []


@pytest.fixture
def stuck() -> Iterator[Stuck]:
    state = Stuck()

    @pw.step_function("slow.lookup", inline=False)
    def lookup(data: dict, ctx: pw.StepContext) -> dict:
        state.attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            state.release.wait(30)
            return {"late": True}
        return {"attempt": ctx.attempt}

    @pw.workflow("slow.order")
    def order(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("lookup", "slow.lookup", {}, retries=input["retries"], timeout="300ms")

    yield state
    state.release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("pikku-step-"):
            thread.join(10)


def history(run_id: str) -> list[tuple]:
    rows = WorkflowStepHistory.objects.filter(step__run_id=run_id).order_by("attempt")
    return list(rows.values_list("attempt", "status", "error__code", "result"))


def test_timeout__the_attempt_fails_with_timeout_and_is_retried(stuck):
    run_id = pw.start_workflow("slow.order", {"retries": 1})

    drain_queue()

    step = WorkflowStep.objects.get(run_id=run_id, step_key="lookup")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert step.error["code"] == "TIMEOUT"
    assert step.wake_at is not None  # waiting to retry
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING

    deadline = time.monotonic() + 10
    while not fire_due_timers():
        assert time.monotonic() < deadline, "the retry never came due"
        time.sleep(0.02)
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 2})
    assert history(run_id) == [
        (1, StepStatus.FAILED, "TIMEOUT", None),
        (2, StepStatus.SUCCEEDED, None, {"attempt": 2}),
    ]
    stuck.release.set()  # the abandoned attempt returns now: its late result goes nowhere
    for thread in threading.enumerate():
        if thread.name.startswith("pikku-step-"):
            thread.join(10)
    assert history(run_id)[1] == (2, StepStatus.SUCCEEDED, None, {"attempt": 2})
    assert WorkflowStep.objects.get(run_id=run_id, step_key="lookup").result == {"attempt": 2}


def test_timeout__on_the_last_attempt_fails_the_run(stuck):
    run_id = pw.start_workflow("slow.order", {"retries": 0})

    drain_queue()

    step = WorkflowStep.objects.get(run_id=run_id, step_key="lookup")
    assert (step.status, step.attempt, step.error["code"]) == (StepStatus.FAILED, 1, "TIMEOUT")
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "lookup")
    assert stuck.attempts == [1]
