"""Queued steps run in place: a pass running on a worker of a step's cluster claims the step,
runs it in its own process and goes on, with no message and no new pass, while the message it
handles has budget left; everything else goes through the queue (docs/architecture.md §4).
Each exclusion of the rule is pinned here; the kill/SIGTERM behaviour in tests/e2e."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowEvent, WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


class Chain:
    """A workflow of `k` queued steps in a row; step `block_at` waits for `gate`; step
    `fail_at` fails its first attempt."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()


@pytest.fixture
def chain() -> Chain:
    state = Chain()

    @pw.step_function("chain.add", inline=False)
    def add(data: dict, ctx: pw.StepContext) -> int:
        state.calls.append((ctx.step_key, ctx.attempt))
        if data["i"] == data.get("block_at"):
            state.entered.set()
            state.gate.wait(10)
        if data["i"] == data.get("fail_at") and ctx.attempt == 1:
            raise RuntimeError("flaky")
        return data["i"]

    @pw.step_function("chain.gpu", inline=False, queue="gpu")
    def gpu(data: dict, ctx: pw.StepContext) -> str:
        return "rendered"

    @pw.step_function("chain.bounded", inline=False, timeout="10m")
    def bounded(data: dict, ctx: pw.StepContext) -> str:
        return "in time"

    @pw.workflow("chain.run")
    def run(wf: pw.Workflow, input: dict) -> int:
        total = 0
        for i in range(input["k"]):
            step = {key: input[key] for key in ("block_at", "fail_at") if key in input}
            total += wf.do(f"s{i}", "chain.add", {"i": i, **step}, retries=1, retry_delay=0)
        return total

    @pw.workflow("chain.one")
    def one(wf: pw.Workflow, input: dict) -> str:
        return wf.do("only", input["function"], {})

    return state


def started(name: str, input: dict) -> str:
    """A queued start, its start message taken (the test runs that pass itself)."""
    from django_q.models import OrmQ

    run_id = pw.start_workflow(name, input)
    OrmQ.objects.all().delete()
    return run_id


def dispatches(run_id: str) -> list[tuple[str, int, str | None]]:
    return list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id)
        .order_by("step__created_at", "attempt")
        .values_list("step__step_key", "attempt", "dispatch")
    )


def test_in_place__a_worker_pass_runs_every_queued_step_itself(chain):
    run_id = pw.start_workflow("chain.run", {"k": 10})

    ran = drain_queue()

    assert ran == [(ORCHESTRATE, (run_id,))]  # the start message, and no other
    assert WorkflowRun.objects.get(pk=run_id).output == sum(range(10))
    assert {dispatch for _, _, dispatch in dispatches(run_id)} == {"in_place"}
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id)
    assert not history.filter(scheduled_at__isnull=False).exists()  # pending -> running


def test_in_place__a_step_costs_one_statement(chain):
    def statements_for(k: int) -> int:
        run_id = pw.start_workflow("chain.run", {"k": k})
        with CaptureQueriesContext(connection) as captured:
            tasks.orchestrate(run_id)
        assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
        # The event log's rows ride in those statements (triggers write them).
        assert brief_log(run_id) == [
            (f"s{i}", event) for i in range(k) for event in ("pending", "running", "succeeded")
        ]
        return len(captured.captured_queries)

    statements_for(2)  # warm: statement caches, first-use imports
    # Each step's creation records the previous step's result: one statement, one commit.
    assert statements_for(12) - statements_for(2) == 10


def brief_log(run_id: str) -> list[tuple[str, str]]:
    events = WorkflowEvent.objects.filter(run_id=run_id).order_by("seq")
    return list(events.values_list("step_key", "event"))


@override_settings(PIKKU_WORKFLOWS={"IN_PLACE_MAX_STEPS": 3})
def test_in_place__a_spent_step_budget_hands_the_next_step_to_the_queue(chain):
    run_id = started("chain.run", {"k": 5})

    tasks.orchestrate(run_id)

    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "s3"))]  # exactly one message
    assert [key for key, _, _ in dispatches(run_id)] == ["s0", "s1", "s2", "s3"]
    drain_queue()
    assert [dispatch for _, _, dispatch in dispatches(run_id)] == [
        "in_place",
        "in_place",
        "in_place",
        "queued",  # the worker that takes s3 continues the run: a new message, a new budget
        "in_place",
    ]
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


@override_settings(PIKKU_WORKFLOWS={"IN_PLACE_MAX_SECONDS": 0})
def test_in_place__a_spent_time_budget_hands_every_step_to_the_queue(chain):
    run_id = pw.start_workflow("chain.run", {"k": 3})

    drain_queue()

    assert [dispatch for _, _, dispatch in dispatches(run_id)] == ["queued"] * 3
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_in_place__a_step_of_another_cluster_goes_to_its_queue(chain):
    run_id = started("chain.one", {"function": "chain.gpu"})

    tasks.orchestrate(run_id)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="only")
    assert step.status == StepStatus.SCHEDULED
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "only"))]
    from django_q.models import OrmQ

    assert list(OrmQ.objects.values_list("key", flat=True)) == ["gpu"]


def test_in_place__a_timeout_longer_than_the_message_has_left_goes_to_the_queue(chain):
    # Q_CLUSTER["timeout"] is 300 s: a step allowed 10 minutes cannot be bounded in place.
    run_id = pw.start_workflow("chain.one", {"function": "chain.bounded"})

    tasks.orchestrate(run_id)

    assert dispatches(run_id) == [("only", 1, "queued")]


def test_in_place__off_the_main_thread_a_timeout_cannot_be_enforced_so_it_goes_to_the_queue(
    chain,
):
    @pw.step_function("chain.quick", inline=False, timeout="5s")
    def quick(data: dict, ctx: pw.StepContext) -> str:
        return "quick"

    run_id = pw.start_workflow("chain.one", {"function": "chain.quick"})
    thread = threading.Thread(target=lambda: (tasks.orchestrate(run_id), connection.close()))
    thread.start()
    thread.join(10)

    assert dispatches(run_id) == [("only", 1, "queued")]


def test_in_place__a_child_run_is_queued_and_the_parent_parks_never_blocking_the_worker(chain):
    @pw.workflow("chain.parent")
    def parent(wf: pw.Workflow, input: dict) -> int:
        return wf.do("child", "chain.run", {"k": 2})

    run_id = started("chain.parent", {})

    tasks.orchestrate(run_id)  # the worker's pass ends at the child: no chain.add ran here

    assert chain.calls == []
    assert WorkflowStep.objects.get(run_id=run_id, step_key="child").status == StepStatus.WAITING
    [child] = WorkflowRun.objects.filter(parent_run_id=run_id)
    assert queued_tasks() == [(ORCHESTRATE, (str(child.pk),))]
    drain_queue()  # the child's own pass runs its steps in place, then wakes the parent
    assert {dispatch for _, _, dispatch in dispatches(str(child.pk))} == {"in_place"}
    assert WorkflowRun.objects.get(pk=run_id).output == 1


def test_in_place__a_failed_attempt_is_retried_through_the_queue(chain):
    run_id = pw.start_workflow("chain.run", {"k": 2, "fail_at": 0})

    drain_queue()

    assert dispatches(run_id) == [
        ("s0", 1, "in_place"),
        ("s0", 2, "queued"),
        ("s1", 1, "in_place"),
    ]
    assert chain.calls == [("s0", 1), ("s0", 2), ("s1", 1)]


def test_in_place__cancel_takes_effect_at_the_next_step(chain):
    run_id = pw.start_workflow("chain.run", {"k": 6, "block_at": 2})
    driver = threading.Thread(target=lambda: (tasks.orchestrate(run_id), connection.close()))
    driver.start()
    assert chain.entered.wait(10)

    pw.cancel_run(run_id, reason="customer called")
    chain.gate.set()
    driver.join(10)

    assert [key for key, _ in chain.calls] == ["s0", "s1", "s2"]  # s2 finished; nothing after
    assert not WorkflowStep.objects.filter(run_id=run_id, step_key="s3").exists()
    assert WorkflowStep.objects.get(run_id=run_id, step_key="s2").status == StepStatus.SUCCEEDED
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.CANCELLED


def test_in_place__a_step_reached_again_after_a_lost_message_runs_in_place(
    chain, through_the_queue
):
    run_id = pw.start_workflow("chain.run", {"k": 1})
    tasks.orchestrate(run_id)  # dispatched (the queue path): its message is then lost
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()
    WorkflowStep.objects.filter(run_id=run_id).update(status=StepStatus.PENDING)

    with override_settings(PIKKU_WORKFLOWS={"IN_PLACE": True}):
        tasks.orchestrate(run_id)  # a relayed pass claims the pending step in place

    assert dispatches(run_id) == [("s0", 1, "in_place")]
    wait_until(lambda: WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED)
