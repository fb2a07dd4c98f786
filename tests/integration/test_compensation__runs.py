"""compensate= on step functions (docs/code-workflows.md, "Compensation"): when a run fails (after
its on_error handlers) or is cancelled with compensate=True, its succeeded steps are undone by
durable `<key>:compensate` steps, latest first, each with its own retries; a compensation that
spends its attempts ends the run COMPENSATION_FAILED, and retry_run retries the compensations."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured

import pikku_workflows as pw
from pikku_workflows.exceptions import InvalidTransition
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)


def run_of(run_id: str) -> WorkflowRun:
    return WorkflowRun.objects.get(pk=run_id)


def keys(run_id: str) -> list[str]:
    return list(
        WorkflowStep.objects.filter(run_id=run_id)
        .order_by("created_at")
        .values_list("step_key", flat=True)
    )


def test_compensation__a_failed_run_undoes_its_steps_latest_first_then_fails(trip):
    run_id = pw.start_workflow("trip.plan", {"no_car": True})
    summary = drain(run_id)

    assert trip["log"] == [
        "book flight",
        "book hotel",
        "notify",
        "on_error",
        "undo hotel-1",
        "undo flight-1",
    ]
    assert (summary["status"], summary["compensation"]) == ("failed", "compensated")
    assert summary["error"]["code"] == "STEP_FAILED"  # what the run failed of, not the undo
    assert keys(run_id)[-2:] == ["hotel:compensate", "flight:compensate"]
    undo = WorkflowStep.objects.get(run_id=run_id, step_key="hotel:compensate")
    assert undo.data == {"data": {"what": "hotel"}, "result": {"booking": "hotel-1"}}
    assert (undo.from_step_key, undo.result, undo.status) == ("hotel", "undone hotel", "succeeded")


def test_compensation__a_run_that_completes_undoes_nothing(trip):
    summary = drain(pw.start_workflow("trip.plan", {}))
    assert (summary["status"], summary["compensation"]) == ("completed", None)
    assert "undo" not in " ".join(trip["log"])


def test_compensation__cancel_with_compensate_undoes_then_ends_cancelled(trip):
    run_id = pw.start_workflow("trip.plan", {"wait": True})
    drain(run_id)
    assert run_of(run_id).status == RunStatus.RUNNING  # waiting for the signal

    summary = pw.cancel_run(run_id, reason="customer changed plans", compensate=True)
    assert (summary["status"], summary["compensation"]) == ("running", "running")
    summary = drain(run_id)

    assert (summary["status"], summary["compensation"]) == ("cancelled", "compensated")
    assert summary["error"]["code"] == "WORKFLOW_CANCELLED"
    assert trip["log"][-2:] == ["undo hotel-1", "undo flight-1"]
    assert "car" not in keys(run_id)
    assert pw.cancel_run(run_id, compensate=True)["status"] == "cancelled"  # quietly, again


def test_compensation__a_plain_cancel_undoes_nothing(trip):
    run_id = pw.start_workflow("trip.plan", {"wait": True})
    drain(run_id)
    summary = pw.cancel_run(run_id)
    assert (summary["status"], summary["compensation"]) == ("cancelled", None)
    assert not any(entry.startswith("undo") for entry in trip["log"])


def test_compensation__a_failing_compensation_fails_the_run_and_retry_retries_only_it(trip):
    trip["refuse_undo"] = 6  # the hotel's undo spends all its attempts (5 retries)
    run_id = pw.start_workflow("trip.plan", {"no_car": True})
    summary = drain(run_id, advance="1h")

    assert (summary["status"], summary["compensation"]) == ("failed", "compensation_failed")
    run = run_of(run_id)
    assert (run.error["code"], run.error["step_key"]) == ("COMPENSATION_FAILED", "hotel:compensate")
    assert run.error["cause"]["code"] == "STEP_FAILED"  # what it was undoing for
    assert "flight:compensate" not in keys(run_id)  # one at a time: the next waits for it
    car_attempts = WorkflowStep.objects.get(run_id=run_id, step_key="car").attempt

    pw.retry_run(run_id)
    summary = drain(run_id)

    assert (summary["status"], summary["compensation"]) == ("failed", "compensated")
    assert summary["error"]["code"] == "STEP_FAILED"
    assert trip["log"][-2:] == ["undo hotel-1", "undo flight-1"]
    # The body was not retried: the car was not tried again, nothing booked twice.
    assert WorkflowStep.objects.get(run_id=run_id, step_key="car").attempt == car_attempts
    assert trip["log"].count("book hotel") == 1


def test_compensation__a_compensated_run_cannot_be_retried(trip):
    run_id = pw.start_workflow("trip.plan", {"no_car": True})
    drain(run_id)
    with pytest.raises(InvalidTransition, match="its steps were undone"):
        pw.retry_run(run_id)


def test_compensation__naming_an_unknown_step_function_is_refused_at_registration(trip):
    with pytest.raises(
        ImproperlyConfigured, match=re.escape("'trip.unbok' names no registered step")
    ):
        pw.step_function("trip.other", compensate="trip.unbok")
    with pytest.raises(ImproperlyConfigured, match=re.escape("Did you mean 'trip.unbook'")):
        pw.step_function("trip.other", compensate="trip.unbok")
