"""Retries owned by the workflow: attempt budgets, StepFailed in the body, `on_error`
compensation, one history row per attempt, and long retry waits that park the run."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.rows import attempt_statuses, load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def always_fails():
    """Registers `retries.always_fails`; returns the attempts it saw."""
    attempts = []

    @pw.step_function("retries.always_fails")
    def fails(data, ctx):
        attempts.append(ctx.attempt)
        raise ConnectionError(f"card declined on attempt {ctx.attempt}")

    return attempts


@pytest.mark.parametrize("retry_delay", [0, 1, "1ms"])
def test_retries__default_is_five_retries(always_fails, retry_delay):
    @pw.workflow("retries.default")
    def default(wf, input):
        return wf.do("charge", "retries.always_fails", retry_delay=input["delay"])

    run_id = pw.start_workflow("retries.default", {"delay": retry_delay}, inline=True)

    assert always_fails == [1, 2, 3, 4, 5, 6]
    step = load_step(run_id, "charge")
    assert (step.status, step.attempt, step.attempt_limit, step.retries) == (
        StepStatus.FAILED,
        6,
        6,
        5,
    )
    assert step.wake_at is None
    assert attempt_statuses(run_id, "charge") == [(n, StepStatus.FAILED) for n in range(1, 7)]


def test_retries__default_comes_from_the_setting(always_fails):
    @pw.workflow("retries.configured")
    def configured(wf, input):
        return wf.do("charge", "retries.always_fails", retry_delay=0)

    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_STEP_RETRIES": 2}):
        pw.start_workflow("retries.configured", {}, inline=True)

    assert always_fails == [1, 2, 3]


def test_retries__zero_retries_means_exactly_one_attempt(always_fails):
    @pw.workflow("retries.zero")
    def zero(wf, input):
        return wf.do("charge", "retries.always_fails", retries=0)

    run_id = pw.start_workflow("retries.zero", {}, inline=True)

    assert always_fails == [1]
    assert attempt_statuses(run_id, "charge") == [(1, StepStatus.FAILED)]
    assert load_run(run_id).status == RunStatus.FAILED


def test_retries__a_later_attempt_succeeding_completes_the_run():
    @pw.step_function("retries.third_time_lucky")
    def lucky(data, ctx):
        if ctx.attempt < 3:
            raise TimeoutError("try again")
        return {"attempt": ctx.attempt}

    @pw.workflow("retries.lucky")
    def lucky_workflow(wf, input):
        return wf.do("charge", "retries.third_time_lucky", retries=5, retry_delay=0)

    run_id = pw.start_workflow("retries.lucky", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 3})
    assert attempt_statuses(run_id, "charge") == [
        (1, StepStatus.FAILED),
        (2, StepStatus.FAILED),
        (3, StepStatus.SUCCEEDED),
    ]
    step = load_step(run_id, "charge")
    assert (step.attempt, step.error, step.result) == (3, None, {"attempt": 3})


def test_retries__history_keeps_each_attempts_error(always_fails):
    @pw.workflow("retries.errors")
    def errors(wf, input):
        return wf.do("charge", "retries.always_fails", retries=2, retry_delay=0)

    run_id = pw.start_workflow("retries.errors", {}, inline=True)

    messages = list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id)
        .order_by("attempt")
        .values_list("error__message", flat=True)
    )
    assert messages == [f"card declined on attempt {n}" for n in (1, 2, 3)]


def test_retries__exhausted_step_raises_step_failed_that_the_body_may_catch(always_fails):
    caught = []

    @pw.workflow("retries.fallback")
    def fallback(wf, input):
        try:
            wf.do("charge", "retries.always_fails", retries=1, retry_delay=0)
        except pw.StepFailed as exc:
            caught.append((exc.code, exc.step_key, exc.error["message"]))
            return {"fallback": True}
        return {"fallback": False}

    run_id = pw.start_workflow("retries.fallback", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"fallback": True})
    assert caught == [("STEP_FAILED", "charge", "card declined on attempt 2")]
    assert load_step(run_id, "charge").status == StepStatus.FAILED


def test_retries__exhausted_step_raises_step_failed_again_on_replay(always_fails):
    caught = []

    @pw.workflow("retries.fallback_replayed")
    def fallback_replayed(wf, input):
        try:
            wf.do("charge", "retries.always_fails", retries=1, retry_delay=0)
        except pw.StepFailed as exc:
            caught.append(exc.step_key)
        wf.suspend("after the failure")
        return "done"

    run_id = pw.start_workflow("retries.fallback_replayed", {}, inline=True)
    pw.resume_run(run_id)
    orchestrate(run_id)

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert caught == ["charge", "charge"]
    assert always_fails == [1, 2]


def test_retries__uncaught_step_failed_fails_the_run_with_step_failed(always_fails):
    after = []

    @pw.workflow("retries.uncaught")
    def uncaught(wf, input):
        wf.do("charge", "retries.always_fails", retries=1, retry_delay=0)
        after.append("reached")

    run_id = pw.start_workflow("retries.uncaught", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "STEP_FAILED"
    assert run.error["step_key"] == "charge"
    assert "card declined on attempt 2" in run.error["message"]
    assert {"code", "message", "type", "traceback", "step_key"} <= set(run.error)
    assert after == []


def test_retries__on_error_runs_once_as_its_own_step_and_the_run_still_fails(always_fails):
    compensations = []

    @pw.step_function("retries.refund")
    def refund(data, ctx):
        compensations.append((data, ctx.step_key, ctx.attempt))
        return {"refunded": True}

    @pw.workflow("retries.compensated")
    def compensated(wf, input):
        wf.do(
            "charge",
            "retries.always_fails",
            {"amount": 12},
            retries=2,
            retry_delay=0,
            on_error="retries.refund",
        )
        return "not reached"

    run_id = pw.start_workflow("retries.compensated", {}, inline=True)

    assert always_fails == [1, 2, 3]
    # The handler gets the failed step's input, its error and which attempt failed last: a refund
    # can name the charge it refunds.
    assert compensations == [
        (
            {
                "data": {"amount": 12},
                "error": {
                    "code": "ConnectionError",
                    "message": "card declined on attempt 3",
                    "type": "builtins.ConnectionError",
                },
                "step_key": "charge",
                "attempt": 3,
            },
            "charge:onError",
            1,
        )
    ]
    handler = load_step(run_id, "charge:onError")
    assert (handler.status, handler.function_name, handler.result) == (
        StepStatus.SUCCEEDED,
        "retries.refund",
        {"refunded": True},
    )
    assert handler.from_step_key == "charge"
    assert handler.attempt_limit == 1
    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "charge")


def test_retries__on_error_is_not_run_again_on_replay(always_fails):
    compensations = []

    @pw.step_function("retries.refund_once")
    def refund_once(data, ctx):
        compensations.append(ctx.step_key)
        return None

    @pw.workflow("retries.compensated_then_suspended")
    def compensated_then_suspended(wf, input):
        with contextlib.suppress(pw.StepFailed):
            wf.do("charge", "retries.always_fails", retries=0, on_error="retries.refund_once")
        wf.suspend("look at it")
        return "done"

    run_id = pw.start_workflow("retries.compensated_then_suspended", {}, inline=True)
    pw.resume_run(run_id)
    orchestrate(run_id)

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert compensations == ["charge:onError"]


def test_retries__failing_on_error_handler_keeps_the_original_error(always_fails):
    @pw.step_function("retries.refund_fails")
    def refund_fails(data, ctx):
        raise RuntimeError("refund service down")

    @pw.workflow("retries.compensation_fails")
    def compensation_fails(wf, input):
        wf.do("charge", "retries.always_fails", retries=0, on_error="retries.refund_fails")

    run_id = pw.start_workflow("retries.compensation_fails", {}, inline=True)

    handler = load_step(run_id, "charge:onError")
    assert handler.status == StepStatus.FAILED
    assert handler.error["message"] == "refund service down"
    # The handler gets exactly one attempt.
    assert attempt_statuses(run_id, "charge:onError") == [(1, StepStatus.FAILED)]
    run = load_run(run_id)
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "charge")
    assert "card declined on attempt 1" in run.error["message"]


def test_retries__succeeding_step_does_not_run_on_error():
    compensations = []

    @pw.step_function("retries.refund_unused")
    def refund_unused(data, ctx):
        compensations.append(1)

    @pw.workflow("retries.no_compensation")
    def no_compensation(wf, input):
        return wf.do("charge", lambda: "paid", on_error="retries.refund_unused")

    run_id = pw.start_workflow("retries.no_compensation", {}, inline=True)

    assert load_run(run_id).output == "paid"
    assert compensations == []
    assert not WorkflowStep.objects.filter(run_id=run_id, step_key="charge:onError").exists()


def test_retries__short_wait_happens_in_the_inline_caller():
    @pw.step_function("retries.flaky_once")
    def flaky_once(data, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("retries.short_wait")
    def short_wait(wf, input):
        return wf.do("call", "retries.flaky_once", retries=1, retry_delay="50ms")

    run_id = pw.start_workflow("retries.short_wait", {}, inline=True)

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, "ok")


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 1})
def test_retries__wait_longer_than_the_inline_limit_parks_the_run(always_fails):
    @pw.workflow("retries.long_wait")
    def long_wait(wf, input):
        return wf.do("charge", "retries.always_fails", retries=2, retry_delay="10s")

    before = timezone.now()
    run_id = pw.start_workflow("retries.long_wait", {}, inline=True)

    assert always_fails == [1]
    run = load_run(run_id)
    assert run.status == RunStatus.RUNNING
    assert run.lease_holder is None
    step = load_step(run_id, "charge")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert step.wake_at is not None
    assert before + timedelta(seconds=9) < step.wake_at < timezone.now() + timedelta(seconds=11)
    status = pw.get_run_status(run_id)
    assert status["status"] == "running"
    assert status["waiting_on"]["kind"] == "retry"
    assert status["waiting_on"]["step_key"] == "charge"
    assert status["waiting_on"]["attempt"] == 2
    assert status["waiting_on"]["at"] == step.wake_at.isoformat()


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 1})
def test_retries__parked_retry_runs_its_next_attempt_once_due():
    attempts = []

    @pw.step_function("retries.second_works")
    def second_works(data, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("retries.parked_then_due")
    def parked_then_due(wf, input):
        return wf.do("call", "retries.second_works", retries=1, retry_delay="1h")

    run_id = pw.start_workflow("retries.parked_then_due", {}, inline=True)
    orchestrate(run_id)  # not due yet: the pass parks again without a new attempt
    assert attempts == [1]

    # What the timer loop does when the backoff is over: the row is due, a pass replays.
    WorkflowStep.objects.filter(run_id=run_id, step_key="call").update(
        wake_at=timezone.now() - timedelta(seconds=1)
    )
    orchestrate(run_id)

    assert attempts == [1, 2]
    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "ok")
    assert attempt_statuses(run_id, "call") == [(1, StepStatus.FAILED), (2, StepStatus.SUCCEEDED)]
    assert load_step(run_id, "call").wake_at is None


def test_retries__queued_pass_parks_even_a_short_retry_wait():
    attempts = []

    @pw.step_function("retries.fails_first")
    def fails_first(data, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("retries.on_a_worker")
    def on_a_worker(wf, input):
        return wf.do("call", "retries.fails_first", retries=1, retry_delay="200ms")

    run_id = pw.start_workflow("retries.on_a_worker", {})
    orchestrate(run_id)  # a worker's pass: it must not sleep in the worker

    assert attempts == [1]
    assert load_run(run_id).status == RunStatus.RUNNING
    assert pw.get_run_status(run_id)["waiting_on"]["kind"] == "retry"


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 0})
def test_retries__exponential_backoff_doubles_from_a_second_with_jitter(always_fails):
    @pw.workflow("retries.exponential")
    def exponential(wf, input):
        return wf.do("charge", "retries.always_fails", retries=3, retry_delay="exponential")

    waits = []
    run_id = pw.start_workflow("retries.exponential", {}, inline=True)
    for _ in range(2):
        step = load_step(run_id, "charge")
        failed_at = WorkflowStepHistory.objects.get(step=step, attempt=step.attempt).failed_at
        waits.append((step.wake_at - failed_at).total_seconds())
        step.wake_at = timezone.now() - timedelta(seconds=1)
        step.save(update_fields=["wake_at"])
        orchestrate(run_id)

    assert always_fails == [1, 2, 3]
    assert load_step(run_id, "charge").retry_delay == "exponential"
    # 1 s then 2 s, each ±20 % (a few ms of slack between computing wake_at and the history time).
    assert 0.75 <= waits[0] <= 1.25
    assert 1.55 <= waits[1] <= 2.45


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 0})
@pytest.mark.parametrize(("retry_delay", "stored"), [(250, "250"), ("15s", "15000")])
def test_retries__int_or_duration_delay_is_fixed(always_fails, retry_delay, stored):
    @pw.workflow("retries.fixed")
    def fixed(wf, input):
        return wf.do("charge", "retries.always_fails", retries=1, retry_delay=input["delay"])

    run_id = pw.start_workflow("retries.fixed", {"delay": retry_delay}, inline=True)

    step = load_step(run_id, "charge")
    failed_at = WorkflowStepHistory.objects.get(step=step, attempt=1).failed_at
    assert step.retry_delay == stored
    wait_ms = (step.wake_at - failed_at).total_seconds() * 1000
    assert int(stored) - 50 <= wait_ms <= int(stored) + 50


@pytest.mark.parametrize("retries", [-1, True, "3", 1.5])
def test_retries__invalid_retries_fail_the_run_with_invalid_input(retries):
    calls = []

    @pw.workflow("retries.invalid")
    def invalid(wf, input):
        wf.do("x", lambda: calls.append(1), retries=retries)

    run_id = pw.start_workflow("retries.invalid", {}, inline=True)

    assert (load_run(run_id).status, load_run(run_id).error["code"]) == (
        RunStatus.FAILED,
        "INVALID_INPUT",
    )
    assert calls == []
