"""`POST runs/{id}/signals/{name}/`: 202 with the run's summary, delivered to the wait for it or
kept until one is reached, any JSON payload, audited with the sender; an ended run refuses it
(409), an unknown or invisible run is a 404 and nothing is written; names are checked as
`wf.wait_for_signal` checks them (400); a run you may see takes signals from its starter and
from holders of `signal_workflowrun` (else 403, audited `deny`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from rest_framework.test import APIClient

from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun, WorkflowSignal
from pikku_workflows.status import RunStatus
from tests.api.conftest import API
from tests.rows import load_run

pytestmark = pytest.mark.django_db

NAME = "payment.settled"


def signal_url(run: Any, name: str = NAME) -> str:
    run_id = run.pk if isinstance(run, WorkflowRun) else run
    return f"{API}runs/{run_id}/signals/{quote(name, safe='')}/"


def send(api: APIClient, run: Any, payload: Any = None, name: str = NAME) -> Any:
    return api.post(signal_url(run, name), {"payload": payload}, format="json")


@pytest.fixture
def waiting(shop, operator) -> WorkflowRun:
    """A run parked on `wf.wait_for_signal("signal", NAME)`."""
    return shop.start(operator, signal=NAME)


def test_signal__to_a_waiting_run_is_accepted_with_its_summary_and_the_run_goes_on(
    operator, operator_api, waiting, worker
):
    assert load_run(waiting.pk).status == RunStatus.RUNNING

    response = worker(lambda: send(operator_api, waiting, {"amount": 12}))

    assert response.status_code == 202
    summary = response.json()
    assert (summary["id"], summary["status"]) == (str(waiting.pk), "running")
    assert summary["waiting_on"] == {"kind": "pass"}  # the wait has its payload; a pass is queued
    run = load_run(waiting.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.output["signal"] == {"amount": 12}
    entry = WorkflowAuditEntry.objects.get(run_id=waiting.pk, action="signal")
    assert (entry.user, entry.payload["signal"], entry.payload["taken_by_step"]) == (
        operator,
        NAME,
        "signal",
    )


def test_signal__before_the_wait_is_kept_until_the_wait_takes_it(shop, operator, operator_api):
    run = shop.start(operator, sleep="1h", signal=NAME)

    response = send(operator_api, run, "early")

    assert response.status_code == 202
    assert response.json()["waiting_on"]["kind"] == "timer"
    kept = WorkflowSignal.objects.get(run=run)
    assert (kept.name, kept.payload, kept.consumed_at, kept.sent_by) == (
        NAME,
        "early",
        None,
        load_run(run.pk).started_by,
    )


@pytest.mark.parametrize(
    "payload", [None, 0, 2.5, True, "text", [1, "two", None], {"a": {"b": [False, {}]}}]
)
def test_signal__any_json_payload_reaches_the_body(operator_api, waiting, worker, payload):
    response = worker(lambda: send(operator_api, waiting, payload))

    assert response.status_code == 202
    assert load_run(waiting.pk).output["signal"] == payload


def test_signal__without_a_body_carries_no_payload(operator_api, waiting, worker):
    response = worker(lambda: operator_api.post(signal_url(waiting)))

    assert response.status_code == 202
    assert load_run(waiting.pk).output["signal"] is None


@pytest.mark.parametrize("name", ["zahlung.bestätigt v2", "stripe/charge.succeeded", "a//b/"])
def test_signal__names_are_taken_as_written_slashes_too(shop, operator, operator_api, worker, name):
    run = shop.start(operator, signal=name)

    quoted = worker(lambda: send(operator_api, run, "quoted", name=name))
    run = shop.start(operator, signal=name)
    raw = worker(lambda: operator_api.post(f"{API}runs/{run.pk}/signals/{name}/", format="json"))

    assert (quoted.status_code, raw.status_code) == (202, 202)
    assert WorkflowSignal.objects.filter(name=name).count() == 2


@pytest.mark.parametrize("name", ["x" * 201, "   ", "bad\x00name"])
def test_signal__a_bad_name_is_invalid_input_and_nothing_is_kept(operator_api, waiting, name):
    response = send(operator_api, waiting, 1, name=name)

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert "signal name" in response.json()["detail"]
    assert not WorkflowSignal.objects.exists()


def test_signal__a_name_of_200_characters_is_accepted(operator_api, waiting):
    assert send(operator_api, waiting, 1, name="x" * 200).status_code == 202


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ('{"payload": ', "application/json"),
        ('{"payload": NaN}', "application/json"),
        ("[1, 2]", "application/json"),
        ('"payload"', "application/json"),
        ("payload=1", "application/x-www-form-urlencoded"),
    ],
)
def test_signal__a_malformed_body_is_refused_and_nothing_is_kept(
    operator_api, waiting, body, content_type
):
    response = operator_api.post(signal_url(waiting), body, content_type=content_type)

    assert response.status_code in (400, 415)
    assert response.json()["code"] in ("INVALID_INPUT", "UNSUPPORTED_MEDIA_TYPE")
    assert not WorkflowSignal.objects.exists()


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_signal__to_an_ended_run_is_invalid_transition_and_nothing_is_kept(
    shop, operator, operator_api, status
):
    run = {
        "completed": lambda: shop.start(operator),
        "failed": lambda: shop.failed(operator),
        "cancelled": lambda: shop.start(operator, signal=NAME),
    }[status]()
    if status == "cancelled":
        operator_api.post(f"{API}runs/{run.pk}/cancel/", format="json")
    assert load_run(run.pk).status == status

    response = send(operator_api, run, 1)

    assert (response.status_code, response.json()["code"]) == (409, "INVALID_TRANSITION")
    assert status in response.json()["detail"]
    assert not WorkflowSignal.objects.exists()
    assert not WorkflowAuditEntry.objects.filter(action="signal").exists()


@pytest.mark.parametrize("run_id", ["00000000-0000-0000-0000-000000000000", "not-a-run"])
def test_signal__to_an_unknown_run_is_run_not_found(operator_api, run_id):
    response = send(operator_api, run_id, 1)

    assert (response.status_code, response.json()["code"]) == (404, "RUN_NOT_FOUND")


def test_signal__a_run_you_may_not_see_is_not_found_and_nothing_is_kept(
    shop, make_user, client_for, waiting
):
    response = send(client_for(make_user("stranger")), waiting, 1)

    assert (response.status_code, response.json()["code"]) == (404, "RUN_NOT_FOUND")
    assert not WorkflowSignal.objects.exists()


def test_signal__the_runs_owner_needs_no_permission(shop, alice, client_for):
    run = shop.start(alice, signal=NAME)

    assert send(client_for(alice), run, 1).status_code == 202


def test_signal__a_reader_of_every_run_may_not_signal_anothers_run_and_the_refusal_is_audited(
    make_user, client_for, waiting
):
    reader = make_user("reader", "view_workflowrun")

    response = send(client_for(reader), waiting, 1)

    assert (response.status_code, response.json()["code"]) == (403, "SIGNAL_FORBIDDEN")
    assert "signal_workflowrun" in response.json()["detail"]
    assert not WorkflowSignal.objects.exists()
    (deny,) = WorkflowAuditEntry.objects.filter(run_id=waiting.pk)
    assert (deny.action, deny.user, deny.payload) == (
        "deny",
        reader,
        {"operation": "signal", "signal": NAME},
    )
    assert load_run(waiting.pk).status == RunStatus.RUNNING


def test_signal__a_holder_of_the_signal_permission_signals_any_run_it_sees(
    make_user, client_for, waiting
):
    api = client_for(make_user("webhooks", "view_workflowrun", "signal_workflowrun"))

    assert send(api, waiting, 1).status_code == 202
    assert WorkflowSignal.objects.get(run=waiting).sent_by.username == "webhooks"


def test_signal__the_permission_does_not_show_a_run_you_may_not_see(make_user, client_for, waiting):
    response = send(client_for(make_user("blind", "signal_workflowrun")), waiting, 1)

    assert (response.status_code, response.json()["code"]) == (404, "RUN_NOT_FOUND")
    assert not WorkflowAuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_signal__under_atomic_requests_a_refusal_keeps_its_deny_row(
    monkeypatch, make_user, client_for, waiting
):
    # As a host may set it (the `settings` fixture cannot: the connection keeps its own copy).
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)

    response = send(client_for(make_user("reader", "view_workflowrun")), waiting, 1)

    assert response.status_code == 403
    assert WorkflowAuditEntry.objects.get(run_id=waiting.pk).action == "deny"


def test_signal__the_tenant_hook_narrows_who_may_signal(operator, operator_api, waiting, settings):
    settings.PIKKU_WORKFLOWS = {"RUN_QUERYSET_FILTER": lambda request, runs: runs.none()}

    assert send(operator_api, waiting, 1).status_code == 404
    assert not WorkflowSignal.objects.exists()


def test_signal__anonymous_is_not_authenticated(waiting):
    response = send(APIClient(), waiting, 1)

    assert (response.status_code, response.json()["code"]) == (403, "NOT_AUTHENTICATED")
    assert not WorkflowSignal.objects.exists()


def test_signal__only_post(operator_api, waiting):
    response = operator_api.get(signal_url(waiting))

    assert (response.status_code, response.json()["code"]) == (405, "METHOD_NOT_ALLOWED")
