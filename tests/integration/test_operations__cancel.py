"""`pw.cancel_run`: running or suspended runs end cancelled, their timers are disarmed, their
live children are cancelled too, and a step already running cannot advance the run."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.engine.operations.runs import wait_for_run
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _audit(run_id: str) -> list[WorkflowAuditEntry]:
    return list(WorkflowAuditEntry.objects.filter(run_id=run_id).order_by("id"))


@pytest.fixture
def napping():
    """`cancel.napping`: one step, then a one-hour sleep (the run parks on the timer)."""

    @pw.workflow("cancel.napping")
    def napping_workflow(wf, input):
        wf.do("first", lambda: "done")
        wf.sleep("nap", "1h")
        return "woke"

    return "cancel.napping"


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


def test_cancel_run__running_run_is_cancelled_and_audited(napping, ops):
    run_id = pw.start_workflow(napping, {}, inline=True)

    summary = pw.cancel_run(run_id, reason="customer called", by=ops)

    assert summary["status"] == RunStatus.CANCELLED
    assert summary["waiting_on"] is None
    assert summary["error"] == {"code": "WORKFLOW_CANCELLED", "message": "customer called"}
    run = load_run(run_id)
    assert (run.status, run.finished_at is not None) == (RunStatus.CANCELLED, True)
    [entry] = _audit(run_id)
    assert (entry.action, entry.user, entry.reason) == ("cancel", ops, "customer called")
    assert entry.payload == {
        "status_before": "running",
        "status_after": "cancelled",
        "disarmed_timers": ["nap"],
        "cancelled_children": [],
    }


def test_cancel_run__suspended_run_is_cancelled(ops):
    @pw.workflow("cancel.gate")
    def gate(wf, input):
        wf.suspend("hold")

    run_id = pw.start_workflow("cancel.gate", {}, inline=True)

    pw.cancel_run(run_id, by=ops)

    assert load_run(run_id).status == RunStatus.CANCELLED
    assert load_run(run_id).error["message"] == "Cancelled by an operator."
    assert [e.payload["status_before"] for e in _audit(run_id)] == ["suspended"]


@pytest.mark.parametrize("ending", ["completed", "failed"])
def test_cancel_run__ended_run_raises_invalid_transition_and_changes_nothing(ending):
    @pw.workflow("cancel.ends")
    def ends(wf, input):
        if input["ending"] == "failed":
            raise RuntimeError("ended badly")
        return "ended"

    run_id = pw.start_workflow("cancel.ends", {"ending": ending}, inline=True)
    before = WorkflowRun.objects.filter(pk=run_id).values().get()

    with pytest.raises(pw.InvalidTransition) as caught:
        pw.cancel_run(run_id, reason="too late")

    assert caught.value.code == "INVALID_TRANSITION"
    assert WorkflowRun.objects.filter(pk=run_id).values().get() == before
    assert _audit(run_id) == []


def test_cancel_run__second_cancel_is_quiet_and_writes_no_audit_row(napping, ops):
    run_id = pw.start_workflow(napping, {}, inline=True)
    pw.cancel_run(run_id, reason="first click", by=ops)
    finished_at = load_run(run_id).finished_at

    summary = pw.cancel_run(run_id, reason="second click", by=ops)

    assert summary["status"] == RunStatus.CANCELLED
    assert load_run(run_id).finished_at == finished_at
    assert load_run(run_id).error["message"] == "first click"
    assert [e.reason for e in _audit(run_id)] == ["first click"]


def test_cancel_run__disarms_the_sleep_timer_so_it_never_fires(napping):
    run_id = pw.start_workflow(napping, {}, inline=True)
    assert load_step(run_id, "nap").wake_at is not None

    pw.cancel_run(run_id)
    # Even a timer already due must not fire for a cancelled run.
    WorkflowStep.objects.filter(run_id=run_id, step_key="nap").update(wake_at=None)

    nap = load_step(run_id, "nap")
    assert (nap.status, nap.wake_at) == (StepStatus.SCHEDULED, None)
    assert fire_due_timers() == 0
    assert load_run(run_id).status == RunStatus.CANCELLED


def test_cancel_run__disarms_a_retry_backoff(ops):
    attempts = []

    @pw.step_function("cancel.flaky")
    def flaky(data, ctx):
        attempts.append(ctx.attempt)
        raise ConnectionError("down")

    @pw.workflow("cancel.retrying")
    def retrying(wf, input):
        return wf.do("call", "cancel.flaky", retries=3, retry_delay="1h")

    run_id = pw.start_workflow("cancel.retrying", {}, inline=True)
    assert load_step(run_id, "call").wake_at is not None

    pw.cancel_run(run_id, by=ops)

    call = load_step(run_id, "call")
    assert (call.status, call.wake_at) == (StepStatus.FAILED, None)
    assert _audit(run_id)[0].payload["disarmed_timers"] == ["call"]
    orchestrate(run_id)
    assert attempts == [1]


def test_cancel_run__cancels_live_children_recursively(ops):
    @pw.workflow("cancel.grandchild")
    def grandchild(wf, input):
        wf.sleep("nap", "1h")

    @pw.workflow("cancel.child")
    def child(wf, input):
        return wf.do("grandchild", "cancel.grandchild", {})

    @pw.workflow("cancel.done_child")
    def done_child(wf, input):
        return "done"

    @pw.workflow("cancel.parent")
    def parent(wf, input):
        wf.do("done", "cancel.done_child", {})
        return wf.do("child", "cancel.child", {})

    parent_id = pw.start_workflow("cancel.parent", {}, inline=True)
    done_id = str(load_step(parent_id, "done").child_run_id)
    child_id = str(load_step(parent_id, "child").child_run_id)
    grandchild_id = str(load_step(child_id, "grandchild").child_run_id)
    assert load_run(grandchild_id).status == RunStatus.RUNNING

    pw.cancel_run(parent_id, reason="order withdrawn", by=ops)

    statuses = {pk: load_run(pk).status for pk in (parent_id, done_id, child_id, grandchild_id)}
    assert statuses == {
        parent_id: RunStatus.CANCELLED,
        done_id: RunStatus.COMPLETED,
        child_id: RunStatus.CANCELLED,
        grandchild_id: RunStatus.CANCELLED,
    }
    assert _audit(parent_id)[0].payload["cancelled_children"] == [child_id]
    [child_entry] = _audit(child_id)
    assert child_entry.user == ops
    assert child_entry.reason == f"Parent run {parent_id} was cancelled: order withdrawn"
    assert child_entry.payload["parent_run_id"] == parent_id
    assert child_entry.payload["cancelled_children"] == [grandchild_id]
    [grandchild_entry] = _audit(grandchild_id)
    assert child_id in grandchild_entry.reason
    assert load_step(grandchild_id, "nap").wake_at is None
    assert _audit(done_id) == []


def test_cancel_run__cancelling_a_child_alone_fails_its_parents_step():
    @pw.workflow("cancel.slow_child")
    def slow_child(wf, input):
        wf.sleep("nap", "1h")

    @pw.workflow("cancel.waiting_parent")
    def waiting_parent(wf, input):
        return wf.do("child", "cancel.slow_child", {}, retries=0)

    parent_id = pw.start_workflow("cancel.waiting_parent", {}, inline=True)
    child_id = str(load_step(parent_id, "child").child_run_id)

    pw.cancel_run(child_id, reason="not needed")
    drain_queue()

    step = load_step(parent_id, "child")
    assert (step.status, step.error["code"]) == (StepStatus.FAILED, "CHILD_RUN_CANCELLED")
    parent = load_run(parent_id)
    assert (parent.status, parent.error["step_key"]) == (RunStatus.FAILED, "child")


def test_cancel_run__queued_step_finishes_and_is_recorded_but_the_run_stays_cancelled():
    after = []

    @pw.step_function("cancel.pay", inline=False)
    def pay(data, ctx):
        # The operator cancels while this attempt runs on a worker.
        pw.cancel_run(ctx.run_id, reason="mid-flight")
        return {"paid": 5}

    @pw.step_function("cancel.ship")
    def ship(data, ctx):
        after.append(ctx.step_key)
        return "shipped"

    @pw.workflow("cancel.order")
    def order(wf, input):
        paid = wf.do("pay", "cancel.pay", {})
        return wf.do("ship", "cancel.ship", paid)

    run_id = pw.start_workflow("cancel.order", {})
    drain_queue()

    pay_step = load_step(run_id, "pay")
    assert (pay_step.status, pay_step.result) == (StepStatus.SUCCEEDED, {"paid": 5})
    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.CANCELLED, None)
    assert not WorkflowStep.objects.filter(run_id=run_id, step_key="ship").exists()
    assert after == []
    assert OrmQ.objects.count() == 0


def test_cancel_run__in_process_step_finishes_but_the_pass_starts_nothing_more():
    calls = []

    @pw.workflow("cancel.inline_order")
    def inline_order(wf, input):
        def pay():
            calls.append("pay")
            pw.cancel_run(wf.run_id)
            return "paid"

        paid = wf.do("pay", pay)
        calls.append("after pay")
        return wf.do("ship", lambda: calls.append("ship") or paid)

    run_id = pw.start_workflow("cancel.inline_order", {}, inline=True)

    assert load_step(run_id, "pay").result == "paid"
    assert calls == ["pay", "after pay"]
    assert load_run(run_id).status == RunStatus.CANCELLED
    assert list(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", flat=True)) == [
        "pay"
    ]
    with pytest.raises(pw.RunCancelled):
        wait_for_run(run_id, timeout=1)


@pytest.mark.parametrize("run_id", ["00000000-0000-0000-0000-000000000000", "not-a-uuid"])
def test_cancel_run__unknown_run_raises_run_not_found(run_id):
    with pytest.raises(pw.RunNotFound):
        pw.cancel_run(run_id)
