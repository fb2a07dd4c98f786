"""A step function that is not registered: no attempt, the run suspended with RPC_NOT_FOUND;
deploy it and resume, and it runs."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepStatus
from tests.factories import WorkflowStepFactory
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _history(run_id: str, key: str) -> list[tuple]:
    return list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
        .order_by("attempt")
        .values_list("attempt", "status", "running_at")
    )


@pytest.fixture
def ships_later():
    """A workflow calling `missing.ship`, which is not registered (yet)."""

    @pw.workflow("missing.order")
    def order(wf, input):
        packed = wf.do("pack", lambda: "packed")
        shipped = wf.do("ship", "missing.ship", {"parcel": packed}, retries=2)
        return {"shipped": shipped}

    return pw.start_workflow("missing.order", {}, inline=True)


def test_missing_function__suspends_the_run_with_rpc_not_found(ships_later):
    run_id = ships_later

    run = load_run(run_id)
    assert run.status == RunStatus.SUSPENDED
    assert run.error["code"] == "RPC_NOT_FOUND"
    assert run.error["step_key"] == "ship"
    assert "'missing.ship'" in run.error["message"]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="ship")
    assert (step.status, step.attempt, step.function_name) == (
        StepStatus.PENDING,
        1,
        "missing.ship",
    )
    assert (step.data, step.from_step_key, step.attempt_limit) == ({"parcel": "packed"}, "pack", 3)
    # No attempt ran: the step's only history row is attempt 1, still pending.
    assert _history(run_id, "ship") == [(1, StepStatus.PENDING, None)]
    assert pw.get_run_status(run_id)["waiting_on"] == {
        "kind": "suspend",
        "reason": run.error["message"],
    }


def test_missing_function__resumed_before_it_is_deployed_suspends_again(ships_later):
    run_id = ships_later

    pw.resume_run(run_id)
    orchestrate(run_id)

    assert (load_run(run_id).status, load_run(run_id).error["code"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
    )
    assert _history(run_id, "ship") == [(1, StepStatus.PENDING, None)]


def test_missing_function__deployed_and_resumed_the_run_completes(ships_later):
    run_id = ships_later
    calls = []

    @pw.step_function("missing.ship")
    def ship(data, ctx):
        calls.append((data, ctx.attempt))
        return f"shipped {data['parcel']}"

    pw.resume_run(run_id)
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output, run.error) == (
        RunStatus.COMPLETED,
        {"shipped": "shipped packed"},
        None,
    )
    assert calls == [({"parcel": "packed"}, 1)]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="ship")
    assert (step.status, step.attempt) == (StepStatus.SUCCEEDED, 1)
    ((attempt, status, running_at),) = _history(run_id, "ship")
    assert (attempt, status) == (1, StepStatus.SUCCEEDED)
    assert running_at is not None


def test_missing_function__unknown_on_error_handler_suspends_the_run():
    @pw.step_function("missing.fails")
    def fails(data, ctx):
        raise RuntimeError("declined")

    @pw.workflow("missing.handler")
    def handler(wf, input):
        wf.do("charge", "missing.fails", retries=0, on_error="missing.refund")

    run_id = pw.start_workflow("missing.handler", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
        "charge:onError",
    )
    assert _history(run_id, "charge:onError") == [(1, StepStatus.PENDING, None)]


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 0})
def test_missing_function__gone_before_a_retry_suspends_without_a_new_attempt():
    @pw.step_function("missing.flaky")
    def flaky(data, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("missing.retry")
    def retry(wf, input):
        return wf.do("call", "missing.flaky", retries=2, retry_delay="1h")

    run_id = pw.start_workflow("missing.retry", {}, inline=True)
    # A rolling deploy: the retry is due on a process that does not have the function.
    del registry.step_functions["missing.flaky"]
    WorkflowStep.objects.filter(run_id=run_id, step_key="call").update(
        wake_at=timezone.now() - timedelta(seconds=1)
    )

    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
        "call",
    )
    step = WorkflowStep.objects.get(run_id=run_id, step_key="call")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert [row[:2] for row in _history(run_id, "call")] == [(1, StepStatus.FAILED)]

    pw.step_function("missing.flaky")(flaky)  # deployed again
    pw.resume_run(run_id)
    orchestrate(run_id)

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, "ok")
    assert [row[:2] for row in _history(run_id, "call")] == [
        (1, StepStatus.FAILED),
        (2, StepStatus.SUCCEEDED),
    ]


def test_missing_function__gone_when_a_lapsed_attempt_is_reclaimed_suspends_the_run():
    @pw.step_function("missing.slow")
    def slow(data, ctx):
        return "ok"

    @pw.workflow("missing.lapsed")
    def lapsed(wf, input):
        return wf.do("call", "missing.slow")

    run_id = pw.start_workflow("missing.lapsed", {})
    # The process running attempt 1 died: the step is running with a lapsed lease.
    step = WorkflowStepFactory(
        run_id=run_id,
        step_key="call",
        function_name="missing.slow",
        status=StepStatus.RUNNING,
        lease_expires_at=timezone.now() - timedelta(minutes=1),
    )
    del registry.step_functions["missing.slow"]

    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error["code"]) == (RunStatus.SUSPENDED, "RPC_NOT_FOUND")
    step.refresh_from_db()
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)


def test_missing_function__name_deployed_later_as_a_workflow_runs_as_a_child():
    @pw.workflow("missing.parent")
    def parent(wf, input):
        return wf.do("invoice", "missing.invoice_workflow", {"order": 7})

    run_id = pw.start_workflow("missing.parent", {}, inline=True)
    assert (load_run(run_id).status, load_run(run_id).error["code"]) == (
        RunStatus.SUSPENDED,
        "RPC_NOT_FOUND",
    )

    @pw.workflow("missing.invoice_workflow")
    def invoice_workflow(wf, input):
        return {"invoice": input["order"]}

    pw.resume_run(run_id)
    orchestrate(run_id)  # a worker's pass: it starts the child run for a worker
    child = WorkflowRun.objects.get(parent_run_id=run_id)
    orchestrate(child.pk)
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"invoice": 7})
    child.refresh_from_db()
    assert child.status == RunStatus.COMPLETED
    step = WorkflowStep.objects.get(run_id=run_id, step_key="invoice")
    assert (step.kind, step.child_run_id, step.attempt) == ("child", child.pk, 1)


@pytest.fixture
def typo() -> dict[str, str]:
    """`missing.typo` asks for the step function its `name` says: first a typo of the
    registered `missing.charge`, until the test fixes it."""
    code = {"name": "missing.chrage"}

    @pw.step_function("missing.charge")
    def charge(data, ctx):
        return {"charged": data["amount"], "attempt": ctx.attempt}

    @pw.step_function("missing.refund")
    def refund(data, ctx):
        return {}

    @pw.workflow("missing.typo")
    def order(wf, input):
        return wf.do("charge", code["name"], {"amount": 5}, retries=1, retry_delay="1h")

    return code


def test_missing_function__a_typo_suggests_the_registered_name_and_logs_a_warning(typo, caplog):
    caplog.set_level(logging.WARNING, logger="pikku_workflows.events")

    run_id = pw.start_workflow("missing.typo", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.error["code"]) == (RunStatus.SUSPENDED, "RPC_NOT_FOUND")
    assert run.error["message"] == (
        "Step function 'missing.chrage' is not registered here (step 'charge'); did you mean "
        "'missing.charge'? deploy it (or fix the name) and resume the run."
    )
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert (warning.run_id, warning.step_key, warning.function) == (
        run_id,
        "charge",
        "missing.chrage",
    )
    assert run_id in warning.getMessage() and "did you mean 'missing.charge'?" in (
        warning.getMessage()
    )


def test_missing_function__a_typo_fixed_heals_on_resume(typo, caplog):
    caplog.set_level(logging.INFO, logger="pikku_workflows.events")
    run_id = pw.start_workflow("missing.typo", {}, inline=True)

    typo["name"] = "missing.charge"  # the fix, deployed
    pw.resume_run(run_id)
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output, run.error) == (
        RunStatus.COMPLETED,
        {"charged": 5, "attempt": 1},
        None,
    )
    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.function_name, step.attempt, step.attempt_limit) == ("missing.charge", 1, 2)
    assert [row[:2] for row in _history(run_id, "charge")] == [(1, StepStatus.SUCCEEDED)]
    assert any(
        "now calls 'missing.charge' instead of 'missing.chrage'" in r.getMessage()
        for r in caplog.records
    )


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 0})
def test_missing_function__a_step_that_ran_does_not_change_its_function(typo):
    """Only a step no attempt ran takes the new name: one that ran is non-deterministic."""

    @pw.step_function("missing.declines")
    def declines(data, ctx):
        raise ConnectionError("declined")

    typo["name"] = "missing.declines"
    run_id = pw.start_workflow("missing.typo", {}, inline=True)  # attempt 1 failed, retry in 1h
    WorkflowStep.objects.filter(run_id=run_id, step_key="charge").update(wake_at=timezone.now())

    typo["name"] = "missing.charge"
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "NON_DETERMINISTIC")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="charge")
    assert (step.function_name, step.attempt) == ("missing.declines", 1)
