"""Queue messages only prompt: late, duplicate and stray messages change nothing (docs/architecture.md §8)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


class Calls:
    def __init__(self) -> None:
        self.bodies = 0
        self.steps: list[tuple[str, int]] = []


@pytest.fixture
def calls() -> Calls:
    """`msg.pay` (queued; fails while `fail` is set) inside `msg.order`, which counts its passes."""
    seen = Calls()

    @pw.step_function("msg.pay", inline=False)
    def pay(data: dict, ctx: pw.StepContext) -> dict:
        seen.steps.append((ctx.step_key, ctx.attempt))
        if data.get("fail"):
            raise RuntimeError("card declined")
        return {"paid": data["amount"]}

    @pw.workflow("msg.order")
    def order(wf: pw.Workflow, input: dict) -> dict:
        seen.bodies += 1
        return wf.do("pay", "msg.pay", input, retries=0)

    return seen


def snapshot(run_id: str) -> dict:
    """Everything a message could change about a run."""
    run = WorkflowRun.objects.filter(pk=run_id).values(
        "status", "output", "error", "lease_holder", "rerun_requested", "updated_at"
    )
    steps = WorkflowStep.objects.filter(run_id=run_id).values_list(
        "step_key", "status", "attempt", "result", "error", "lease_expires_at", "updated_at"
    )
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id).values_list(
        "step__step_key", "attempt", "status", "result"
    )
    return {"run": list(run), "steps": sorted(steps), "history": sorted(history)}


def deliver_everything(run_id: str) -> None:
    """Every message the run could ever receive, delivered late and twice."""
    for _ in range(2):
        tasks.orchestrate(run_id)
        tasks.execute_step(run_id, "pay")


@pytest.mark.parametrize(
    ("input", "status"),
    [({"amount": 5}, RunStatus.COMPLETED), ({"amount": 5, "fail": True}, RunStatus.FAILED)],
)
def test_settled_run__late_messages_change_nothing(calls, input, status):
    run_id = pw.start_workflow("msg.order", input)
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == status
    before, bodies = snapshot(run_id), calls.bodies

    deliver_everything(run_id)
    drain_queue()

    assert snapshot(run_id) == before
    assert calls.bodies == bodies
    assert calls.steps == [("pay", 1)]


def test_settled_run__orchestrate_returns_before_any_lock_or_write(calls):
    run_id = pw.start_workflow("msg.order", {"amount": 5, "fail": True})
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.FAILED

    with CaptureQueriesContext(connection) as context:
        tasks.orchestrate(run_id)

    statements = [query["sql"] for query in context.captured_queries]
    assert len(statements) == 1 and statements[0].startswith("SELECT"), statements
    assert "FOR UPDATE" not in statements[0]


def test_duplicate_orchestrate__a_parked_run_dispatches_its_step_once(calls):
    run_id = pw.start_workflow("msg.order", {"amount": 5})
    for _ in range(3):
        orchestrate(run_id)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="pay")
    assert (step.status, step.attempt) == (StepStatus.SCHEDULED, 1)
    assert [args for task, args in queued_tasks() if task == EXECUTE_STEP] == [(run_id, "pay")]
    assert calls.bodies == 3
    assert calls.steps == []

    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"paid": 5})
    assert calls.steps == [("pay", 1)]


def test_duplicate_execute_step__a_recorded_result_is_not_run_again(calls):
    run_id = pw.start_workflow("msg.order", {"amount": 5})
    orchestrate(run_id)
    tasks.execute_step(run_id, "pay")
    before = snapshot(run_id)

    tasks.execute_step(run_id, "pay")
    tasks.execute_step(run_id, "pay")

    assert snapshot(run_id) == before
    assert calls.steps == [("pay", 1)]
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert calls.steps == [("pay", 1)]


def test_unknown_run__messages_are_acknowledged_and_do_nothing(calls):
    stranger = str(uuid.uuid4())

    tasks.orchestrate(stranger)
    tasks.execute_step(stranger, "pay")

    assert not WorkflowRun.objects.exists()
    assert not WorkflowStep.objects.exists()
    assert queued_tasks() == []
    assert (calls.bodies, calls.steps) == (0, [])


def test_unknown_step_key__message_does_nothing(calls):
    run_id = pw.start_workflow("msg.order", {"amount": 5})
    orchestrate(run_id)
    before = snapshot(run_id)

    tasks.execute_step(run_id, "no-such-step")
    tasks.execute_step(run_id, "pay:onError")

    assert snapshot(run_id) == before
    assert calls.steps == []
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_suspended_run__its_queued_step_starts_nothing_until_resumed(calls):
    # The worker lacks the function: the run is suspended with its step still scheduled. Once
    # the function is deployed, a late message for the step must still not run it while the run
    # is suspended; resuming does.
    pay = registry.step_functions.pop("msg.pay")
    run_id = pw.start_workflow("msg.order", {"amount": 5})
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.SUSPENDED
    registry.step_functions["msg.pay"] = pay
    before = snapshot(run_id)

    tasks.execute_step(run_id, "pay")
    tasks.orchestrate(run_id)

    assert snapshot(run_id) == before
    assert calls.steps == []
    pw.resume_run(run_id)
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"paid": 5})
    assert calls.steps == [("pay", 1)]
