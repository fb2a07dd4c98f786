"""`pw.get_run_status`: exactly the documented fields, per-step attempts and durations, and
what a live run waits on."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model

import pikku_workflows as pw
from pikku_workflows.status import RunStatus, StepStatus

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SUMMARY_KEYS = {
    "id",
    "workflow",
    "status",
    "started_at",
    "finished_at",
    "started_by",
    "steps",
    "planned_steps",
    "waiting_on",
    "output",
    "error",
    "compensation",
    "continued_from",
    "continued_to",
}
STEP_KEYS = {"key", "status", "attempts", "duration_ms", "function", "gather"}


def test_get_run_status__completed_run_has_exactly_the_documented_fields():
    @pw.step_function("status.flaky")
    def flaky(data, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("status.done", planned_steps=["first", "flaky"])
    def done(wf, input):
        wf.do("first", lambda: 1)
        wf.do("flaky", "status.flaky", retries=1, retry_delay=0)
        return {"ok": True}

    carol = get_user_model().objects.create_user("carol")
    run_id = pw.start_workflow("status.done", {}, inline=True, started_by=carol)

    status = pw.get_run_status(run_id)

    assert set(status) == SUMMARY_KEYS
    assert status["id"] == run_id
    assert (status["workflow"], status["status"]) == ("status.done", RunStatus.COMPLETED)
    assert status["started_by"] == "carol"
    assert status["planned_steps"] == ["first", "flaky"]
    assert (status["waiting_on"], status["output"], status["error"]) == (None, {"ok": True}, None)
    assert status["started_at"] <= status["finished_at"]
    assert [set(step) for step in status["steps"]] == [STEP_KEYS, STEP_KEYS]
    first, second = status["steps"]
    assert (first["key"], first["status"], first["attempts"]) == ("first", StepStatus.SUCCEEDED, 1)
    assert first["function"].endswith("<lambda>")
    assert (second["key"], second["status"], second["attempts"], second["function"]) == (
        "flaky",
        StepStatus.SUCCEEDED,
        2,
        "status.flaky",
    )
    for step in status["steps"]:
        assert isinstance(step["duration_ms"], int)
        assert step["duration_ms"] >= 0


def test_get_run_status__failed_run_shows_code_and_message_only():
    @pw.workflow("status.fails")
    def fails(wf, input):
        wf.do("bad", lambda: 1 / 0, retries=0)

    run_id = pw.start_workflow("status.fails", {}, inline=True)

    status = pw.get_run_status(run_id)

    assert set(status) == SUMMARY_KEYS
    assert status["status"] == RunStatus.FAILED
    assert status["error"]["code"] == "STEP_FAILED"
    assert set(status["error"]) == {"code", "message"}
    assert "division by zero" in status["error"]["message"]
    assert (status["waiting_on"], status["output"], status["planned_steps"]) == (None, None, None)
    assert status["finished_at"] is not None
    assert status["started_by"] is None
    (step,) = status["steps"]
    assert (step["key"], step["status"], step["attempts"]) == ("bad", StepStatus.FAILED, 1)
    assert step["duration_ms"] >= 0


def test_get_run_status__suspended_run_waits_on_the_suspend_reason():
    @pw.workflow("status.suspended")
    def suspended(wf, input):
        wf.suspend("needs a human")

    run_id = pw.start_workflow("status.suspended", {}, inline=True)

    status = pw.get_run_status(run_id)

    assert status["status"] == RunStatus.SUSPENDED
    assert status["waiting_on"] == {"kind": "suspend", "reason": "needs a human"}
    assert status["error"] == {"code": "WORKFLOW_SUSPENDED", "message": "needs a human"}
    assert (status["output"], status["finished_at"]) == (None, None)


def test_get_run_status__steps_are_listed_in_the_order_they_ran():
    @pw.workflow("status.ordered")
    def ordered(wf, input):
        for key in ["zeta", "alpha", "mid", "alpha"]:
            wf.do(key, lambda: None)

    run_id = pw.start_workflow("status.ordered", {}, inline=True)

    keys = [step["key"] for step in pw.get_run_status(run_id)["steps"]]
    assert keys == ["zeta", "alpha", "mid", "alpha#1"]


def test_get_run_status__running_step_of_a_long_sleep_has_no_duration_yet():
    @pw.workflow("status.sleeping")
    def sleeping(wf, input):
        wf.sleep("nap", "1d")

    run_id = pw.start_workflow("status.sleeping", {}, inline=True)

    status = pw.get_run_status(run_id)
    (step,) = status["steps"]
    assert (step["status"], step["attempts"], step["duration_ms"], step["function"]) == (
        StepStatus.SCHEDULED,
        1,
        None,
        None,
    )
    assert status["waiting_on"]["kind"] == "timer"
    assert (status["output"], status["error"], status["finished_at"]) == (None, None, None)


def test_get_run_status__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound) as caught:
        pw.get_run_status(uuid.uuid4())

    assert caught.value.code == "RUN_NOT_FOUND"


@pytest.mark.parametrize("operation", ["resume_run", "get_run_status"])
def test_operations__malformed_run_id_raises_run_not_found(operation):
    with pytest.raises(pw.RunNotFound) as caught:
        getattr(pw, operation)("not-a-run-id")

    assert caught.value.code == "RUN_NOT_FOUND"
