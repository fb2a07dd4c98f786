"""Per-run operations (cancel, suspend, resume, retry, fork) and bulk operations."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.api import bulk
from pikku_workflows.engine.operations import control
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from tests.api.conftest import API
from tests.rows import load_run

pytestmark = pytest.mark.django_db


def op_url(run, operation: str) -> str:
    return f"{API}runs/{run.pk}/{operation}/"


@pytest.mark.parametrize(
    ("make", "operation", "after"),
    [
        ("timer", "cancel", "cancelled"),
        ("timer", "suspend", "suspended"),
        ("suspended", "resume", "running"),
        ("failed", "retry", "running"),
    ],
)
def test_operation__answers_the_summary_and_audits_the_reason_and_user(
    shop, operator, operator_api, make, operation, after
):
    run = {
        "timer": lambda: shop.start(sleep="1h"),
        "suspended": lambda: shop.start(review=True),
        "failed": shop.failed,
    }[make]()

    response = operator_api.post(op_url(run, operation), {"reason": "ticket 7"}, format="json")

    assert response.status_code == 200
    assert response.json() == pw.get_run_status(run.pk)
    assert response.json()["status"] == after
    entry = WorkflowAuditEntry.objects.get(run=run, action=operation)
    assert (entry.user, entry.reason) == (operator, "ticket 7")


def test_operation__without_a_body_has_no_reason(shop, operator_api):
    run = shop.start(sleep="1h")

    response = operator_api.post(op_url(run, "cancel"))

    assert response.status_code == 200
    assert WorkflowAuditEntry.objects.get(run=run, action="cancel").reason == ""


def test_operation__illegal_move_is_invalid_transition_and_changes_nothing(shop, operator_api):
    run = shop.start()  # completed

    response = operator_api.post(op_url(run, "suspend"), format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "INVALID_TRANSITION"
    assert load_run(run.pk).status == "completed"
    assert not WorkflowAuditEntry.objects.filter(run=run).exists()


def test_operation__target_already_held_is_a_quiet_success(shop, operator_api):
    run = shop.start(sleep="1h")
    operator_api.post(op_url(run, "cancel"), format="json")

    again = operator_api.post(op_url(run, "cancel"), format="json")

    assert again.status_code == 200
    assert WorkflowAuditEntry.objects.filter(run=run, action="cancel").count() == 1


def test_operation__reason_too_long_is_invalid_input(shop, operator_api):
    run = shop.start(sleep="1h")

    response = operator_api.post(op_url(run, "cancel"), {"reason": "x" * 2001}, format="json")

    assert response.status_code == 400
    assert "reason" in response.json()["fields"]
    assert load_run(run.pk).status == "running"


def test_operation__get_is_not_allowed(shop, operator_api):
    run = shop.start(sleep="1h")

    response = operator_api.get(op_url(run, "cancel"))

    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"


def test_fork__answers_the_new_runs_summary_started_by_the_requester(
    shop, operator, operator_api, worker
):
    source = shop.failed()

    response = worker(
        lambda: operator_api.post(op_url(source, "fork"), {"from_step": "charge"}, format="json")
    )

    assert response.status_code == 200
    new = WorkflowRun.objects.get(pk=response.json()["id"])
    assert new.forked_from_id == source.pk
    assert new.started_by == operator
    assert response.json()["id"] == str(new.pk)
    assert (response.json()["workflow"], response.json()["started_by"]) == (
        "api_tests.order",
        "operator",
    )
    assert [step["key"] for step in response.json()["steps"]] == ["reserve"]  # copied
    assert response["Location"].endswith(f"/runs/{new.pk}/")
    assert pw.get_run_status(new.pk)["status"] == "completed"  # the worker ran it


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "INVALID_INPUT"),
        ({"from_step": "no-such-step"}, 400, "INVALID_INPUT"),
        ({"from_step": ["charge"]}, 400, "INVALID_INPUT"),
    ],
)
def test_fork__needs_a_recorded_step(shop, operator_api, body, status, code):
    source = shop.failed()

    response = operator_api.post(op_url(source, "fork"), body, format="json")

    assert (response.status_code, response.json()["code"]) == (status, code)
    assert WorkflowRun.objects.count() == 1


def test_fork__of_a_live_run_is_invalid_transition(shop, operator_api):
    source = shop.start(sleep="1h")

    response = operator_api.post(op_url(source, "fork"), {"from_step": "charge"}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "INVALID_TRANSITION"


@pytest.fixture
def mixed(shop):
    return {
        "running": shop.start(sleep="1h"),
        "suspended": shop.start(review=True),
        "failed": shop.failed(),
        "completed": shop.start(),
    }


def test_bulk__dry_run_previews_eligible_and_ineligible_runs_and_changes_nothing(
    mixed, operator_api
):
    response = operator_api.post(
        API + "runs/bulk/cancel/", {"workflow": ["api_tests.order"], "dry_run": True}, format="json"
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["operation"], body["dry_run"], body["truncated"]) == ("cancel", True, False)
    assert (body["eligible_count"], body["ineligible_count"]) == (2, 2)
    assert body["eligible"] == [str(mixed["running"].pk), str(mixed["suspended"].pk)]
    assert body["ineligible"] == [
        {
            "id": str(mixed["failed"].pk),
            "status": "failed",
            "reason": "failed: only queued, running or suspended runs can be cancelled",
        },
        {
            "id": str(mixed["completed"].pk),
            "status": "completed",
            "reason": "completed: only queued, running or suspended runs can be cancelled",
        },
    ]
    assert "outcomes" not in body
    assert load_run(mixed["running"].pk).status == "running"


def test_bulk__acts_on_the_eligible_runs_and_reports_each_outcome(mixed, operator, operator_api):
    response = operator_api.post(
        API + "runs/bulk/suspend/",
        {"status": "running,completed", "reason": "freeze"},
        format="json",
    )

    body = response.json()
    assert body["ineligible"] == [
        {
            "id": str(mixed["completed"].pk),
            "status": "completed",
            "reason": "completed: only queued or running runs can be suspended",
        }
    ]
    assert body["outcomes"] == [
        {"id": str(mixed["running"].pk), "outcome": "done", "status": "suspended", "error": None}
    ]
    assert (body["done_count"], body["failed_count"]) == (1, 0)
    entry = WorkflowAuditEntry.objects.get(run=mixed["running"], action="suspend")
    assert (entry.user, entry.reason) == (operator, "freeze")


def test_bulk__already_in_the_target_status_is_ineligible(mixed, operator_api):
    response = operator_api.post(
        API + "runs/bulk/resume/",
        {"status": ["running", "suspended"], "dry_run": True},
        format="json",
    )

    reasons = {item["id"]: item["reason"] for item in response.json()["ineligible"]}
    assert reasons == {str(mixed["running"].pk): "already running"}
    assert response.json()["eligible"] == [str(mixed["suspended"].pk)]


def test_bulk__a_run_the_engine_refuses_is_a_failed_outcome_the_others_go_on(
    mixed, operator_api, monkeypatch
):
    refused = mixed["running"].pk
    real_move_run = control.move_run

    def move_all_but_refused(run_id, *args, **kwargs):
        if run_id == refused:
            raise pw.InvalidTransition(f"run {run_id}", "running", "cancelled")
        return real_move_run(run_id, *args, **kwargs)

    monkeypatch.setattr(control, "move_run", move_all_but_refused)

    body = operator_api.post(
        API + "runs/bulk/cancel/", {"status": "running,suspended"}, format="json"
    ).json()

    outcomes = {item["id"]: item for item in body["outcomes"]}
    assert outcomes[str(refused)]["outcome"] == "failed"
    assert outcomes[str(refused)]["error"]["code"] == "INVALID_TRANSITION"
    assert outcomes[str(mixed["suspended"].pk)]["status"] == "cancelled"
    assert (body["done_count"], body["failed_count"]) == (1, 1)


def test_bulk__over_the_limit_refuses_to_act_but_previews(mixed, operator_api, monkeypatch):
    monkeypatch.setattr(bulk, "BULK_LIMIT", 1)

    preview = operator_api.post(
        API + "runs/bulk/cancel/", {"status": "running,suspended", "dry_run": True}, format="json"
    )
    act = operator_api.post(
        API + "runs/bulk/cancel/", {"status": "running,suspended"}, format="json"
    )

    assert preview.json()["truncated"] is True
    assert len(preview.json()["eligible"]) == 1
    assert preview.json()["eligible_count"] == 2
    assert act.status_code == 400
    assert act.json()["code"] == "INVALID_INPUT"
    assert load_run(mixed["running"].pk).status == "running"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "non_field_errors"),
        ({"dry_run": True, "reason": "x"}, "non_field_errors"),
        ({"statuz": "running"}, "statuz"),
        ({"status": "finished"}, "status"),
        ({"status": {"a": 1}}, "status"),
        ({"status": None}, "status"),
        ({"has_parent": "maybe"}, "has_parent"),
        ({"status": "running", "dry_run": "perhaps"}, "dry_run"),
        ([], "non_field_errors"),
    ],
)
def test_bulk__needs_valid_known_filters_and_changes_nothing_otherwise(
    mixed, operator_api, body, field
):
    response = operator_api.post(API + "runs/bulk/cancel/", body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert field in response.json()["fields"]
    assert load_run(mixed["running"].pk).status == "running"


@pytest.mark.parametrize("operation", ["fork", "delete"])
def test_bulk__unknown_operation_is_not_found(mixed, operator_api, operation):
    response = operator_api.post(
        API + f"runs/bulk/{operation}/", {"status": "failed"}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["code"] == "NOT_FOUND"
    assert WorkflowRun.objects.count() == 4
