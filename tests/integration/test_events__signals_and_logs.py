"""What the engine tells the world (`pikku_workflows.events`): Django signals sent after the
commit, and log lines with `run_id`/`step_key` as `extra`, for starts, ends, failed attempts and
operator actions, whichever path wrote them (in the pass, on a worker, a lapsed lease)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import transaction
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import events
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

SIGNALS = ("run_started", "run_finished", "step_retrying", "step_failed")


@pytest.fixture
def received() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every signal the engine sends during the test: (name, its arguments)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    receivers = {}
    for name in SIGNALS:

        def receiver(sender: Any, name: str = name, **kwargs: Any) -> None:
            kwargs.pop("signal")
            seen.append((name, kwargs))

        receivers[name] = receiver
        getattr(events, name).connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(events, name).disconnect(receiver)


@pytest.fixture
def flaky() -> dict[str, int]:
    """`events.flaky` fails while `fails` attempts remain; `events.checkout` calls it."""
    state = {"fails": 1}

    @pw.step_function("events.flaky")
    def flaky_step(data: Any, ctx: pw.StepContext) -> str:
        if ctx.attempt <= state["fails"]:
            raise ConnectionError(f"gateway down (attempt {ctx.attempt})")
        return "charged"

    @pw.workflow("events.checkout")
    def checkout(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("charge", "events.flaky", retries=input["retries"], retry_delay=0)

    return state


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pikku_workflows.events" and r.levelno == level]


def test_events__a_run_that_completes_is_started_then_finished(flaky, received, caplog):
    flaky["fails"] = 0
    caplog.set_level(logging.INFO, logger="pikku_workflows")
    run_id = pw.start_workflow("events.checkout", {"retries": 0}, inline=True)

    assert received == [
        ("run_started", {"run_id": run_id, "workflow": "events.checkout", "parent_run_id": None}),
        (
            "run_finished",
            {"run_id": run_id, "workflow": "events.checkout", "status": "completed", "error": None},
        ),
    ]
    finished = _records(caplog, logging.INFO)[-1]
    assert (finished.run_id, finished.getMessage()) == (  # type: ignore[attr-defined]
        run_id,
        f"pikku_workflows: run {run_id} of events.checkout completed",
    )


def test_events__a_failed_attempt_warns_with_attempt_and_next_retry_then_retries(
    flaky, received, caplog
):
    caplog.set_level(logging.INFO, logger="pikku_workflows")
    run_id = pw.start_workflow("events.checkout", {"retries": 1}, inline=True)

    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    retrying = [kwargs for name, kwargs in received if name == "step_retrying"]
    assert len(retrying) == 1
    assert retrying[0]["run_id"] == run_id
    assert (retrying[0]["step_key"], retrying[0]["attempt"], retrying[0]["attempt_limit"]) == (
        "charge",
        1,
        2,
    )
    assert retrying[0]["error"]["message"] == "gateway down (attempt 1)"
    assert retrying[0]["retry_at"] is not None
    assert not [name for name, _ in received if name == "step_failed"]
    (warning,) = _records(caplog, logging.WARNING)
    assert (warning.run_id, warning.step_key, warning.error_code) == (  # type: ignore[attr-defined]
        run_id,
        "charge",
        "ConnectionError",
    )
    message = warning.getMessage()
    assert "attempt 1/2 failed: ConnectionError: gateway down (attempt 1)" in message
    assert "next attempt at " in message


@override_settings(PIKKU_WORKFLOWS={"ADMIN_BASE_URL": "https://ops.example.com"})
def test_events__a_run_that_fails_logs_an_error_with_its_admin_page(flaky, received, caplog):
    flaky["fails"] = 9
    caplog.set_level(logging.INFO, logger="pikku_workflows")
    run_id = pw.start_workflow("events.checkout", {"retries": 0}, inline=True)

    (step_failed,) = [kwargs for name, kwargs in received if name == "step_failed"]
    assert (step_failed["attempt"], step_failed["attempt_limit"]) == (1, 1)
    finished = received[-1]
    assert finished[0] == "run_finished"
    assert (finished[1]["status"], finished[1]["error"]["code"]) == ("failed", "STEP_FAILED")
    (error,) = _records(caplog, logging.ERROR)
    page = f"https://ops.example.com/admin/pikku_workflows/workflowrun/{run_id}/change/"
    assert error.getMessage() == (
        f"pikku_workflows: run {run_id} of events.checkout failed: STEP_FAILED: "
        f"Step 'charge' failed: gateway down (attempt 1) ({page})"
    )
    assert (error.run_id, error.step_key) == (run_id, "charge")  # type: ignore[attr-defined]
    (warning,) = _records(caplog, logging.WARNING)
    assert warning.getMessage().endswith(f"no attempts left ({page})")


def test_events__signals_wait_for_the_commit_and_a_rollback_sends_none(flaky, received):
    flaky["fails"] = 0

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), transaction.atomic():
        pw.start_workflow("events.checkout", {"retries": 0}, inline=True)
        assert received == []
        raise RolledBack
    assert received == []
    with transaction.atomic():
        run_id = pw.start_workflow("events.checkout", {"retries": 0}, inline=True)
        assert received == []
    assert [(name, kwargs["run_id"]) for name, kwargs in received] == [
        ("run_started", run_id),
        ("run_finished", run_id),
    ]


def test_events__a_receiver_that_raises_is_logged_and_changes_nothing(flaky, caplog):
    flaky["fails"] = 0

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("the webhook is down")

    events.run_finished.connect(broken)
    try:
        run_id = pw.start_workflow("events.checkout", {"retries": 0}, inline=True)
    finally:
        events.run_finished.disconnect(broken)
    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    (error,) = _records(caplog, logging.ERROR)
    assert "signal receiver" in error.getMessage()
    assert error.run_id == run_id  # type: ignore[attr-defined]


def test_events__operator_actions_log_info_and_write_the_admin_history(
    flaky, received, caplog, admin_user
):
    flaky["fails"] = 9
    caplog.set_level(logging.INFO, logger="pikku_workflows")
    run_id = pw.start_workflow("events.checkout", {"retries": 0}, inline=True)
    flaky["fails"] = 0
    pw.retry_run(run_id, by=admin_user, reason="gateway is back")

    entry = LogEntry.objects.get(object_id=run_id)
    assert (entry.user, entry.get_change_message()) == (
        admin_user,
        "retry (failed → running): gateway is back",
    )
    info = [r for r in _records(caplog, logging.INFO) if getattr(r, "action", None) == "retry"]
    assert [r.getMessage() for r in info] == [
        f"pikku_workflows: run {run_id}: retry by admin (failed → running): gateway is back"
    ]
    pw.cancel_run(pw.start_workflow("events.checkout", {"retries": 0}), by=admin_user)
    cancelled = [kwargs for name, kwargs in received if name == "run_finished"][-1]
    assert (cancelled["status"], cancelled["workflow"]) == ("cancelled", "events.checkout")
    assert cancelled["error"]["code"] == "WORKFLOW_CANCELLED"


def test_events__a_child_run_is_announced_with_its_parent(received):
    @pw.step_function("events.render")
    def render(data: Any, ctx: pw.StepContext) -> str:
        return "INV-1"

    @pw.workflow("events.invoice")
    def invoice(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("render", "events.render")

    @pw.workflow("events.order")
    def order(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("invoice", "events.invoice", {})

    run_id = pw.start_workflow("events.order", {}, inline=True)
    started = [kwargs for name, kwargs in received if name == "run_started"]
    assert [(s["workflow"], s["parent_run_id"]) for s in started] == [
        ("events.order", None),
        ("events.invoice", run_id),
    ]


@pytest.mark.postgres
def test_events__a_failed_attempt_on_a_worker_warns_too(received, caplog):
    attempts = []

    @pw.step_function("events.queued_flaky", inline=False)
    def queued_flaky(data: Any, ctx: pw.StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("gateway down")
        return "charged"

    @pw.workflow("events.queued")
    def queued(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("charge", "events.queued_flaky", retries=1, retry_delay=60_000)

    run_id = pw.start_workflow("events.queued")
    drain(run_id)
    assert attempts == [1]
    (retrying,) = [kwargs for name, kwargs in received if name == "step_retrying"]
    assert (retrying["run_id"], retrying["step_key"], retrying["attempt"]) == (run_id, "charge", 1)
    (warning,) = _records(caplog, logging.WARNING)
    assert warning.step_key == "charge"  # type: ignore[attr-defined]
