"""`pw.retry_run`: a failed run runs again with a fresh attempt budget for its exhausted steps;
steps that succeeded are not re-run and the attempt number carries on (it is the fencing token)."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.models import (
    WorkflowAuditEntry,
)
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.testing import drain
from tests.queue import drain_queue, queued_tasks
from tests.rows import attempt_statuses, load_run, load_step
from tests.shop import Shop

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


def _failed_order(shop: Shop) -> str:
    """The shop's order with a charge that fails its 3 attempts (retries=2, no delay); the
    gateway stays down until a test repairs it."""
    shop.broken = True
    run_id = str(shop.start(retries=2).pk)
    assert load_run(run_id).status == RunStatus.FAILED
    assert shop.calls == [("reserve", 1), ("charge", 1), ("charge", 2), ("charge", 3)]
    return run_id


def test_retry_run__reruns_only_the_failed_step_and_the_attempt_carries_on(shop, ops):
    run_id = _failed_order(shop)
    shop.broken = False
    OrmQ.objects.all().delete()

    summary = pw.retry_run(run_id, by=ops, reason="gateway fixed")

    assert (summary["status"], summary["error"]) == (RunStatus.RUNNING, None)
    charge = load_step(run_id, "charge")
    assert (charge.status, charge.attempt, charge.attempt_limit, charge.error) == (
        StepStatus.PENDING,
        4,
        6,
        None,
    )
    assert load_run(run_id).finished_at is None
    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]

    drain()

    run = load_run(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"charge": {"charged": 5}, "ship": "shipped"},
    )
    assert shop.calls[4:] == [("charge", 4), ("ship", 1)]
    assert attempt_statuses(run_id, "charge") == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (4, "succeeded"),
    ]
    assert attempt_statuses(run_id, "reserve") == [(1, "succeeded")]
    entry = WorkflowAuditEntry.objects.get(run_id=run_id)
    assert (entry.action, entry.user, entry.reason) == ("retry", ops, "gateway fixed")
    assert entry.payload == {
        "status_before": "failed",
        "status_after": "running",
        "steps": [{"step_key": "charge", "attempt": 3, "attempt_limit": 6}],
    }


def test_retry_run__a_step_failing_again_spends_exactly_the_fresh_budget(shop):
    run_id = _failed_order(shop)

    pw.retry_run(run_id)
    drain()

    assert shop.calls[4:] == [("charge", 4), ("charge", 5), ("charge", 6)]
    charge = load_step(run_id, "charge")
    assert (charge.status, charge.attempt, charge.attempt_limit) == (StepStatus.FAILED, 6, 6)
    run = load_run(run_id)
    assert (run.status, run.error["step_key"]) == (RunStatus.FAILED, "charge")
    assert run.error["message"].endswith("gateway down (attempt 6)")

    shop.broken = False
    pw.retry_run(run_id)
    drain()

    assert load_step(run_id, "charge").attempt == 7
    assert load_run(run_id).status == RunStatus.COMPLETED


def test_retry_run__running_run_is_quiet(shop, ops):
    run_id = _failed_order(shop)
    pw.retry_run(run_id, by=ops)

    summary = pw.retry_run(run_id, by=ops)

    assert summary["status"] == RunStatus.RUNNING
    assert load_step(run_id, "charge").attempt_limit == 6
    assert WorkflowAuditEntry.objects.filter(run_id=run_id).count() == 1


@pytest.mark.parametrize("status", ["completed", "suspended", "cancelled"])
def test_retry_run__a_run_that_did_not_fail_raises_invalid_transition(status):
    @pw.workflow("retry.other")
    def other(wf, input):
        if input["status"] == "suspended":
            wf.suspend("hold")
        if input["status"] == "cancelled":
            wf.sleep("nap", "1h")
        return "done"

    run_id = pw.start_workflow("retry.other", {"status": status}, inline=True)
    if status == "cancelled":
        pw.cancel_run(run_id)
    audit_rows = WorkflowAuditEntry.objects.filter(run_id=run_id).count()

    with pytest.raises(pw.InvalidTransition) as caught:
        pw.retry_run(run_id)

    assert caught.value.code == "INVALID_TRANSITION"
    assert load_run(run_id).status == status
    assert WorkflowAuditEntry.objects.filter(run_id=run_id).count() == audit_rows


def test_retry_run__a_body_that_raised_runs_again_with_its_steps_kept():
    seen = []
    fixed = []

    @pw.workflow("retry.buggy")
    def buggy(wf, input):
        value = wf.do("load", lambda: seen.append("load") or 21)
        if not fixed:
            raise KeyError("bug in the body")
        return value * 2

    run_id = pw.start_workflow("retry.buggy", {}, inline=True)
    assert load_run(run_id).error["type"].endswith("KeyError")
    fixed.append(True)

    pw.retry_run(run_id)
    drain()

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, 42)
    assert seen == ["load"]


def test_retry_run__queued_step_is_dispatched_to_a_worker_again(through_the_queue):
    attempts = []
    broken = [True]

    @pw.step_function("retry.queued", inline=False)
    def queued(data, ctx):
        attempts.append(ctx.attempt)
        if broken[0]:
            raise RuntimeError("worker-side failure")
        return "ok"

    @pw.workflow("retry.remote")
    def remote(wf, input):
        return wf.do("remote", "retry.queued", {}, retries=0)

    run_id = pw.start_workflow("retry.remote", {})
    drain_queue()
    assert (load_run(run_id).status, attempts) == (RunStatus.FAILED, [1])
    broken[0] = False

    pw.retry_run(run_id)
    tasks = drain_queue()

    assert ("pikku_workflows.tasks.execute_step", (run_id, "remote")) in tasks
    assert (load_run(run_id).status, load_run(run_id).output, attempts) == (
        RunStatus.COMPLETED,
        "ok",
        [1, 2],
    )


def test_retry_run__failed_child_step_starts_a_new_child_run():
    broken = [True]

    @pw.workflow("retry.child")
    def child(wf, input):
        if broken[0]:
            raise RuntimeError("child failed")
        return "child ok"

    @pw.workflow("retry.parent")
    def parent(wf, input):
        return wf.do("child", "retry.child", {}, retries=0)

    run_id = pw.start_workflow("retry.parent", {}, inline=True)
    first_child = load_step(run_id, "child").child_run_id
    assert load_run(run_id).status == RunStatus.FAILED
    broken[0] = False

    pw.retry_run(run_id)
    drain()

    step = load_step(run_id, "child")
    assert step.child_run_id not in (None, first_child)
    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, "child ok")
    assert load_run(str(first_child)).status == RunStatus.FAILED


def test_retry_run__compensation_handlers_are_not_rearmed():
    broken = [True]
    handled = []

    @pw.step_function("retry.pay")
    def pay(data, ctx):
        if broken[0]:
            raise RuntimeError("declined")
        return "paid"

    @pw.step_function("retry.refund")
    def refund(data, ctx):
        handled.append(data["error"]["message"])
        raise RuntimeError("refund service down")

    @pw.workflow("retry.compensated")
    def compensated(wf, input):
        return wf.do("pay", "retry.pay", {}, retries=0, on_error="retry.refund")

    run_id = pw.start_workflow("retry.compensated", {}, inline=True)
    assert load_step(run_id, "pay:onError").status == StepStatus.FAILED
    broken[0] = False

    pw.retry_run(run_id)
    drain()

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, "paid")
    handler = load_step(run_id, "pay:onError")
    assert (handler.status, handler.attempt) == (StepStatus.FAILED, 1)
    assert len(handled) == 1
    payload = WorkflowAuditEntry.objects.get(run_id=run_id).payload
    assert [s["step_key"] for s in payload["steps"]] == ["pay"]


def test_retry_run__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.retry_run("00000000-0000-0000-0000-000000000000")
