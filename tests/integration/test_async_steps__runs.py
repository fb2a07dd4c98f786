"""Async step functions (docs/code-workflows.md, "Async step functions"): awaited on the event loop
their pass owns (one loop a pass, closed when it ends) in the pass and on a worker, recorded as a
sync step's attempt is: retried when they raise, stopped at their timeout, fenced by attempt, and
never run again by a replay. Django's ORM is reached through its async API."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.engine.replay.attempts import claim_next_attempt
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepDispatch, StepStatus
from project.demo.models import Order
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db(transaction=True)


def attempts_of(run_id: str, key: str) -> list[tuple[int, str, str | None]]:
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
    return list(history.order_by("attempt").values_list("attempt", "status", "error__code"))


def dispatches(run_id: str) -> list[str]:
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id).order_by("attempt")
    return list(history.values_list("dispatch", flat=True))


@pytest.fixture
def loops() -> list[asyncio.AbstractEventLoop]:
    """Registers `as.*`; `as.where` notes the loop each call ran on."""
    seen: list[asyncio.AbstractEventLoop] = []

    @pw.step_function("as.where")
    async def where(data: int, ctx: pw.StepContext) -> int:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return data + 1

    @pw.step_function("as.queued_where", inline=False)
    async def queued_where(data: int, ctx: pw.StepContext) -> dict:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return {"attempt": ctx.attempt, "data": data}

    @pw.step_function("as.sync_double")
    def sync_double(data: int, ctx: pw.StepContext) -> int:
        return data * 2

    @pw.workflow("as.inline")
    def inline(wf: pw.Workflow, input: dict) -> list:
        first = wf.do("first", "as.where", 1)
        doubled = wf.do("doubled", "as.sync_double", first)
        return [first, doubled, wf.do("second", "as.where", doubled)]

    @pw.workflow("as.queued")
    def queued(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("remote", "as.queued_where", 7)

    return seen


def test_async_step__runs_in_the_pass_on_one_loop_the_pass_closes(loops):
    output = pw.run_to_completion("as.inline", {})

    assert output == [2, 4, 5]
    assert len(loops) == 2 and loops[0] is loops[1]  # one loop for the pass, not one per call
    assert loops[0].is_closed()
    run = WorkflowRun.objects.get(workflow="as.inline")
    steps = WorkflowStep.objects.filter(run=run).order_by("created_at")
    assert [(s.step_key, s.status, s.result) for s in steps] == [
        ("first", StepStatus.SUCCEEDED, 2),
        ("doubled", StepStatus.SUCCEEDED, 4),
        ("second", StepStatus.SUCCEEDED, 5),
    ]


@pytest.mark.postgres
def test_async_step__queued_runs_on_a_worker_on_a_loop_closed_after_it(loops, through_the_queue):
    run_id = pw.start_workflow("as.queued", {})

    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 1, "data": 7})
    assert dispatches(run_id) == [StepDispatch.QUEUED]
    assert len(loops) == 1 and loops[0].is_closed()


@pytest.mark.postgres
def test_async_step__queued_runs_in_place_on_the_pass_loop(loops):
    run_id = pw.start_workflow("as.queued", {})

    drain_queue()

    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert dispatches(run_id) == [StepDispatch.IN_PLACE]
    assert loops[0].is_closed()


def test_async_step__an_error_is_retried_as_a_sync_step_is():
    @pw.step_function("as.flaky")
    async def flaky(data: dict, ctx: pw.StepContext) -> int:
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise ConnectionError("the partner API hung up")
        return ctx.attempt

    @pw.workflow("as.flaky_run")
    def flaky_run(wf: pw.Workflow, input: dict) -> int:
        return wf.do("call", "as.flaky", {}, retries=1, retry_delay="10ms")

    assert pw.run_to_completion("as.flaky_run", {}) == 2
    run = WorkflowRun.objects.get(workflow="as.flaky_run")
    assert attempts_of(run.pk, "call") == [
        (1, StepStatus.FAILED, "ConnectionError"),
        (2, StepStatus.SUCCEEDED, None),
    ]
    step = WorkflowStep.objects.get(run=run, step_key="call")
    assert step.result == 2


def test_async_step__over_its_timeout_is_cancelled_and_recorded_as_a_timeout():
    ran_past_the_wait: list[int] = []
    cancelled: list[int] = []

    @pw.step_function("as.slow", timeout="200ms")
    async def slow(data: dict, ctx: pw.StepContext) -> str:
        try:
            await asyncio.sleep(30 if ctx.attempt == 1 else 0)
        except asyncio.CancelledError:
            cancelled.append(ctx.attempt)
            raise
        ran_past_the_wait.append(ctx.attempt)
        return "answered"

    @pw.workflow("as.slow_run")
    def slow_run(wf: pw.Workflow, input: dict) -> str:
        return wf.do("lookup", "as.slow", {}, retries=1, retry_delay="10ms")

    assert pw.run_to_completion("as.slow_run", {}) == "answered"
    assert (cancelled, ran_past_the_wait) == ([1], [2])
    run = WorkflowRun.objects.get(workflow="as.slow_run")
    assert attempts_of(run.pk, "lookup") == [
        (1, StepStatus.FAILED, "TIMEOUT"),
        (2, StepStatus.SUCCEEDED, None),
    ]


def test_async_step__a_timeout_error_of_its_own_is_an_ordinary_failure():
    @pw.step_function("as.own_timeout", timeout="10s")
    async def own_timeout(data: dict, ctx: pw.StepContext) -> None:
        raise TimeoutError("the partner API timed out")

    @pw.workflow("as.own_timeout_run")
    def own_timeout_run(wf: pw.Workflow, input: dict) -> None:
        wf.do("call", "as.own_timeout", {}, retries=0)

    with pytest.raises(pw.RunFailed):
        pw.run_to_completion("as.own_timeout_run", {})
    step = WorkflowStep.objects.get(step_key="call", run__workflow="as.own_timeout_run")
    assert step.error["type"] == "builtins.TimeoutError"
    assert step.error["message"] == "the partner API timed out"


def test_async_step__replay_takes_its_recorded_result_and_does_not_run_it_again():
    calls: list[int] = []

    @pw.step_function("as.once")
    async def once(data: dict, ctx: pw.StepContext) -> str:
        calls.append(ctx.attempt)
        await asyncio.sleep(0)
        return "looked up"

    @pw.workflow("as.waits")
    def waits(wf: pw.Workflow, input: dict) -> list:
        looked_up = wf.do("lookup", "as.once", {})
        return [looked_up, wf.wait_for_signal("go", "go")]

    run_id = pw.start_workflow("as.waits", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # parked on the signal

    pw.send_signal(run_id, "go", "now")
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, ["looked up", "now"])
    assert calls == [1]


def test_async_step__reaches_the_orm_through_sync_to_async_and_the_async_orm():
    @pw.step_function("as.book")
    async def book(data: dict, ctx: pw.StepContext) -> dict:
        order = await Order.objects.acreate(customer=ctx.run_id, amount=Decimal(data["amount"]))
        counted = await sync_to_async(Order.objects.filter(customer=ctx.run_id).count)()
        return {"order": order.pk, "counted": counted}

    @pw.workflow("as.booking")
    def booking(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("book", "as.book", input)

    output = pw.run_to_completion("as.booking", {"amount": "12.50"})

    run = WorkflowRun.objects.get(workflow="as.booking")
    order = Order.objects.get(customer=str(run.pk))
    assert output == {"order": order.pk, "counted": 1}
    assert order.amount == Decimal("12.50")


def test_async_step__reaches_the_orm_when_the_pass_itself_runs_under_sync_to_async():
    # An async caller (an async view) runs the pass through sync_to_async: the pass's thread is
    # the one asgiref would send the step's queries to, and it is busy running the loop.
    @pw.step_function("as.count")
    async def count(data: dict, ctx: pw.StepContext) -> int:
        return await Order.objects.filter(customer=ctx.run_id).acount()

    @pw.workflow("as.counting")
    def counting(wf: pw.Workflow, input: dict) -> int:
        return wf.do("count", "as.count", input)

    async def async_caller() -> Any:
        async with ThreadSensitiveContext():
            try:
                return await sync_to_async(pw.run_to_completion)("as.counting", {})
            finally:
                await sync_to_async(connections.close_all)()  # the caller's thread's own

    assert asyncio.run(async_caller()) == 0


@pytest.mark.postgres
def test_async_step__a_superseded_attempt_in_the_pass_records_nothing():
    # The pass awaits an in-process async step; meanwhile its lease lapses and another process
    # claims the step's next attempt. The pass's fenced write refuses and it ends quietly.
    @pw.step_function("as.stalls")
    async def stalls(data: dict, ctx: pw.StepContext) -> str:
        if ctx.attempt == 1:
            claim = sync_to_async(lambda: claim_next_attempt(ctx.run_id, ctx.step_key).claimed)
            assert await claim()
        return f"attempt {ctx.attempt}"

    @pw.workflow("as.stalling")
    def stalling(wf: pw.Workflow, input: dict) -> str:
        return wf.do("call", "as.stalls", {}, retries=2)

    run_id = pw.start_workflow("as.stalling", {})
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        orchestrate(run_id)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="call")
    assert (step.status, step.attempt, step.result) == (StepStatus.RUNNING, 2, None)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_async_step__takes_a_timeout_per_call_and_refuses_atomic_per_call():
    @pw.step_function("as.nap")
    async def nap(data: float, ctx: pw.StepContext) -> float:
        await asyncio.sleep(data)
        return data

    @pw.workflow("as.naps")
    def naps(wf: pw.Workflow, input: dict) -> None:
        wf.do("nap", "as.nap", input["seconds"], timeout="100ms", retries=0, atomic=input["atomic"])

    with pytest.raises(pw.RunFailed, match="atomic=True needs a sync function"):
        pw.run_to_completion("as.naps", {"seconds": 0, "atomic": True})

    with pytest.raises(pw.RunFailed):
        pw.run_to_completion("as.naps", {"seconds": 30, "atomic": False})
    step = WorkflowStep.objects.get(step_key="nap", run__status=RunStatus.FAILED)
    assert step.error["code"] == "TIMEOUT"


@pytest.mark.postgres
def test_async_step__a_queued_one_with_a_timeout_runs_in_an_inline_caller_off_the_main_thread():
    # A sync step's timeout needs the main thread's alarm, so a web request's inline run hands
    # it to a worker; an async step's timeout is its loop's, so it runs right there.
    @pw.step_function("as.remote", inline=False, timeout="5s")
    async def remote(data: int, ctx: pw.StepContext) -> int:
        await asyncio.sleep(0)
        return data * 3

    @pw.workflow("as.remote_run")
    def remote_run(wf: pw.Workflow, input: dict) -> int:
        return wf.do("remote", "as.remote", 5)

    outputs: list[Any] = []

    def web_request() -> None:
        try:
            outputs.append(pw.run_to_completion("as.remote_run", {}))
        finally:
            connections.close_all()

    request = threading.Thread(target=web_request)
    request.start()
    request.join(30)

    assert outputs == [15]
    run = WorkflowRun.objects.get(workflow="as.remote_run")
    assert dispatches(run.pk) == [StepDispatch.INLINE]
