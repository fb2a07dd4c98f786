"""A gather's async in-process members run concurrently on the pass's event loop
(docs/code-workflows.md, "Async step functions"): the attempts a round reaches are awaited
together, then each outcome is recorded as a sync member's is, in argument order; sync members
run as ever, and a member's retries, timeout and fencing hold."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.engine.replay.attempts import claim_next_attempt
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db(transaction=True)

MEMBERS = 20


class Spans:
    """When each call of `gs.wait` started and ended (monotonic), by its data."""

    def __init__(self) -> None:
        self.started: dict[object, float] = {}
        self.ended: dict[object, float] = {}
        self.calls: list[object] = []

    def overlapped(self, *names: object) -> bool:
        """Every one of them started before any of them ended: they ran at the same time."""
        return max(self.started[name] for name in names) < min(self.ended[name] for name in names)


@pytest.fixture
def spans() -> Spans:
    """Registers `gs.*`: `gs.wait` awaits 100 ms of I/O and notes its span."""
    seen = Spans()

    @pw.step_function("gs.wait")
    async def wait(data: object, ctx: pw.StepContext) -> object:
        seen.calls.append(data)
        seen.started[data] = time.monotonic()
        await asyncio.sleep(0.1)
        seen.ended[data] = time.monotonic()
        return data

    @pw.step_function("gs.sync_tag")
    def sync_tag(data: str, ctx: pw.StepContext) -> str:
        return f"sync {data}"

    @pw.workflow("gs.twenty")
    def twenty(wf: pw.Workflow, input: dict) -> list:
        members = [wf.call(f"wait{index}", "gs.wait", index) for index in range(MEMBERS)]
        return wf.gather(*members, wf.call("tag", "gs.sync_tag", "member"))

    @pw.workflow("gs.map")
    def map_(wf: pw.Workflow, input: dict) -> list:
        return wf.map("item", "gs.wait", input["items"], max_in_flight=input.get("max"))

    @pw.workflow("gs.branches")
    def branches(wf: pw.Workflow, input: dict) -> list:
        def branch(name: str) -> list:
            return [
                wf.do(f"{name}1", "gs.wait", f"{name}1"),
                wf.do(f"{name}2", "gs.wait", f"{name}2"),
            ]

        return wf.gather(lambda: branch("a"), lambda: branch("b"))

    @pw.workflow("gs.then_waits")
    def then_waits(wf: pw.Workflow, input: dict) -> list:
        results = wf.gather(wf.call("x", "gs.wait", "x"), wf.call("y", "gs.wait", "y"))
        return [*results, wf.wait_for_signal("go", "go")]

    return seen


def members_of(run_id: str) -> list[tuple[str, str, object, int]]:
    rows = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    return list(rows.values_list("step_key", "status", "result", "attempt"))


def test_gather__twenty_async_members_run_at_once_and_each_is_recorded(spans):
    output = pw.run_to_completion("gs.twenty", {})

    assert output == [*range(MEMBERS), "sync member"]  # argument order
    assert spans.overlapped(*range(MEMBERS))
    run = WorkflowRun.objects.get(workflow="gs.twenty")
    steps = members_of(run.pk)
    assert [key for key, *_ in steps] == [f"wait{i}" for i in range(MEMBERS)] + ["tag"]
    assert {(status, attempt) for _, status, _, attempt in steps} == {(StepStatus.SUCCEEDED, 1)}
    assert [result for _, _, result, _ in steps] == output
    gathered = WorkflowStep.objects.filter(run=run, gather_key="wait0").count()
    assert gathered == MEMBERS + 1


@pytest.mark.postgres
def test_gather__async_members_run_at_once_in_a_worker_pass_too(spans):
    run_id = pw.start_workflow("gs.twenty", {})

    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, [*range(MEMBERS), "sync member"])
    assert spans.overlapped(*range(MEMBERS))


def test_map__async_items_run_max_in_flight_at_a_time(spans):
    items = [f"i{index}" for index in range(6)]

    assert pw.run_to_completion("gs.map", {"items": items, "max": 3}) == items

    assert spans.overlapped("i0", "i1", "i2") and spans.overlapped("i3", "i4", "i5")
    # The second wave started once the first had ended.
    assert min(spans.started[i] for i in items[3:]) >= max(spans.ended[i] for i in items[:3])


def test_gather__branches_run_their_async_steps_side_by_side_in_order(spans):
    assert pw.run_to_completion("gs.branches", {}) == [["a1", "a2"], ["b1", "b2"]]

    assert spans.overlapped("a1", "b1") and spans.overlapped("a2", "b2")
    assert spans.started["a2"] >= spans.ended["a1"]  # a branch's own steps stay in order


def test_gather__a_replay_takes_the_recorded_results_and_runs_no_member_again(spans):
    run_id = pw.start_workflow("gs.then_waits", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # parked on the signal

    pw.send_signal(run_id, "go", "now")
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, ["x", "y", "now"])
    assert spans.calls == ["x", "y"]


def test_gather__a_failing_member_is_retried_and_a_slow_one_times_out_as_sync_members_do():
    @pw.step_function("gs.flaky")
    async def flaky(data: str, ctx: pw.StepContext) -> str:
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise ConnectionError("try again")
        return f"{data} on attempt {ctx.attempt}"

    @pw.step_function("gs.slow", timeout="200ms")
    async def slow(data: str, ctx: pw.StepContext) -> str:
        await asyncio.sleep(30)
        return data

    @pw.step_function("gs.broken")
    async def broken(data: str, ctx: pw.StepContext) -> str:
        raise ValueError(data)

    @pw.workflow("gs.mixed")
    def mixed(wf: pw.Workflow, input: dict) -> list:
        results = wf.gather(
            wf.call("flaky", "gs.flaky", "flaky", retries=1, retry_delay="10ms"),
            wf.call("slow", "gs.slow", "slow", retries=0),
            wf.call("broken", "gs.broken", "no stock", retries=0),
            return_exceptions=True,
        )
        return [r if isinstance(r, str) else r.error["code"] for r in results]

    assert pw.run_to_completion("gs.mixed", {}) == ["flaky on attempt 2", "TIMEOUT", "ValueError"]
    run = WorkflowRun.objects.get(workflow="gs.mixed")
    history = WorkflowStepHistory.objects.filter(step__run=run).order_by(
        "step__step_key", "attempt"
    )
    assert list(history.values_list("step__step_key", "attempt", "status", "error__code")) == [
        ("broken", 1, StepStatus.FAILED, "ValueError"),
        ("flaky", 1, StepStatus.FAILED, "ConnectionError"),
        ("flaky", 2, StepStatus.SUCCEEDED, None),
        ("slow", 1, StepStatus.FAILED, "TIMEOUT"),
    ]


@pytest.mark.postgres
def test_gather__a_pass_whose_member_was_superseded_records_nothing_more():
    # While the members run, the pass's leases lapse and another process claims the second
    # member's next attempt: the pass records the first member's outcome, then its fenced write
    # of the second refuses and it ends quietly, leaving the third unrecorded.
    @pw.step_function("gs.stalls")
    async def stalls(data: str, ctx: pw.StepContext) -> str:
        if data == "b" and ctx.attempt == 1:
            claim = sync_to_async(lambda: claim_next_attempt(ctx.run_id, ctx.step_key).claimed)
            assert await claim()
        return data

    @pw.workflow("gs.stalling")
    def stalling(wf: pw.Workflow, input: dict) -> list:
        return wf.gather(*(wf.call(key, "gs.stalls", key, retries=2) for key in "abc"))

    run_id = pw.start_workflow("gs.stalling", {})
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        orchestrate(run_id)

    assert members_of(run_id) == [
        ("a", StepStatus.SUCCEEDED, "a", 1),
        ("b", StepStatus.RUNNING, None, 2),  # the other process's attempt now
        ("c", StepStatus.RUNNING, None, 1),
    ]
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING
