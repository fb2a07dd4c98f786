"""atomic=True step functions (docs/code-workflows.md, "Exactly once"): the function's ORM writes
and its result commit in one transaction ended by the attempt-fenced write of the result. A
superseded attempt commits nothing, a raised error or a timeout rolls the writes back, and the
failure is recorded in its own transaction."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.replay.attempts import claim_next_attempt
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.testing import drain
from project.demo.models import Order
from tests.concurrency.harness import elsewhere
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """Queued steps are executed by `tasks.execute_step`, as a worker would."""


def ordered(data: dict, ctx: pw.StepContext) -> Order:
    """What every step below does first: write an order row naming its run and attempt."""
    return Order.objects.create(customer=f"{ctx.run_id}:{ctx.attempt}", amount=Decimal(1))


def orders_of(run_id: str) -> list[str]:
    return sorted(
        Order.objects.filter(customer__startswith=run_id).values_list("customer", flat=True)
    )


def attempts_of(run_id: str, key: str) -> list[tuple[int, str]]:
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
    return list(history.order_by("attempt").values_list("attempt", "status"))


def start(name: str, input: dict | None = None) -> str:
    run_id = pw.start_workflow(name, input or {})
    orchestrate(run_id)
    return run_id


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "not-atomic"])
def test_atomic__a_superseded_attempt_on_a_worker_commits_none_of_its_writes(atomic):
    # Attempt 1's worker stalls after writing; its lease lapses and a second delivery runs
    # attempt 2 to the end. Then attempt 1 goes on: its fenced write refuses.
    @pw.step_function("a.reserve", inline=False, atomic=atomic)
    def reserve(data: dict, ctx: pw.StepContext) -> str:
        order = ordered(data, ctx)
        if ctx.attempt == 1:
            elsewhere(lambda: tasks.execute_step(ctx.run_id, "reserve"))
        return order.customer

    @pw.workflow("a.stalling")
    def stalling(wf: pw.Workflow, input: dict) -> str:
        return wf.do("reserve", "a.reserve", {}, retries=2)

    run_id = start("a.stalling")
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0, "IN_PLACE": False}):
        tasks.execute_step(run_id, "reserve")

    # The lapsed attempt ended failed (STEP_LEASE_EXPIRED) when attempt 2 took over.
    assert attempts_of(run_id, "reserve") == [(1, StepStatus.FAILED), (2, StepStatus.SUCCEEDED)]
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, f"{run_id}:2")
    # The lapsed attempt's row never committed: exactly one order, from the attempt that counts.
    expected = [f"{run_id}:2"] if atomic else [f"{run_id}:1", f"{run_id}:2"]
    assert orders_of(run_id) == expected


def test_atomic__a_superseded_attempt_in_the_pass_commits_none_of_its_writes():
    # The pass runs an in-process atomic step; meanwhile its lease lapses and another process
    # claims the step's next attempt. The pass's write refuses and it ends quietly.
    @pw.step_function("a.local_reserve", atomic=True)
    def local_reserve(data: dict, ctx: pw.StepContext) -> str:
        order = ordered(data, ctx)
        if ctx.attempt == 1:
            assert elsewhere(lambda: claim_next_attempt(ctx.run_id, ctx.step_key).claimed)
        return order.customer

    @pw.workflow("a.local")
    def local(wf: pw.Workflow, input: dict) -> str:
        return wf.do("reserve", "a.local_reserve", {}, retries=2)

    run_id = pw.start_workflow("a.local", {})
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        orchestrate(run_id)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="reserve")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 2)  # the other process's now
    assert orders_of(run_id) == []
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING


@pytest.mark.parametrize("inline", [True, False], ids=["in-the-pass", "on-a-worker"])
def test_atomic__a_raised_error_rolls_the_writes_back_and_records_the_failure(inline):
    @pw.step_function("a.flaky", inline=inline, atomic=True)
    def flaky(data: dict, ctx: pw.StepContext) -> str:
        order = ordered(data, ctx)
        if ctx.attempt == 1:
            raise RuntimeError("the warehouse said no")
        return order.customer

    @pw.workflow("a.flaky_run")
    def flaky_run(wf: pw.Workflow, input: dict) -> str:
        return wf.do("reserve", "a.flaky", {}, retries=1, retry_delay="1h")

    run_id = start("a.flaky_run")
    if not inline:
        tasks.execute_step(run_id, "reserve")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="reserve")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert step.error["message"] == "the warehouse said no"
    assert attempts_of(run_id, "reserve") == [(1, StepStatus.FAILED)]
    assert orders_of(run_id) == []  # rolled back with the attempt

    drain(run_id, advance="2h")
    assert WorkflowRun.objects.get(pk=run_id).output == f"{run_id}:2"
    assert orders_of(run_id) == [f"{run_id}:2"]


def test_atomic__a_timeout_rolls_the_writes_back():
    @pw.step_function("a.slow", inline=False, atomic=True, timeout="200ms")
    def slow(data: dict, ctx: pw.StepContext) -> None:
        ordered(data, ctx)
        threading.Event().wait(5)

    @pw.workflow("a.slow_run")
    def slow_run(wf: pw.Workflow, input: dict) -> None:
        wf.do("reserve", "a.slow", {}, retries=0)

    run_id = start("a.slow_run")
    tasks.execute_step(run_id, "reserve")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="reserve")
    assert (step.status, step.error["code"]) == (StepStatus.FAILED, "TIMEOUT")
    assert orders_of(run_id) == []


def test_atomic__the_result_commits_with_the_writes_in_one_transaction():
    # Seen from another connection while the step runs: neither its row nor its result.
    seen: list[tuple] = []

    def look(run_id: str) -> None:
        step = WorkflowStep.objects.get(run_id=run_id, step_key="reserve")
        seen.append((orders_of(run_id), step.status))

    @pw.step_function("a.watched", atomic=True)
    def watched(data: dict, ctx: pw.StepContext) -> str:
        order = ordered(data, ctx)
        elsewhere(lambda: look(ctx.run_id))
        return order.customer

    @pw.workflow("a.watched_run")
    def watched_run(wf: pw.Workflow, input: dict) -> str:
        first = wf.do("reserve", "a.watched", {})
        wf.do("after", lambda: None)  # the success is not kept for this step's write
        return first

    run_id = pw.start_workflow("a.watched_run", {}, inline=True)
    assert seen == [([], StepStatus.RUNNING)]
    assert orders_of(run_id) == [f"{run_id}:1"]
    assert WorkflowRun.objects.get(pk=run_id).output == f"{run_id}:1"
