"""Cancel with compensation from each adapter that offers the cancel operation: the admin's
confirmation page (a checkbox), the API's route and its bulk operation (`compensate` in the body)
and `manage.py pikku` (`--compensate`); without it a cancel undoes nothing (docs/code-workflows.md, "Compensation")."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain
from tests.admin_support import operation_url

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/workflows/"


@pytest.fixture
def waiting(trip: dict) -> str:
    """A trip that booked its flight and hotel and waits for a signal before the car."""
    run_id = pw.start_workflow("trip.plan", {"wait": True})
    drain(run_id)
    return run_id


def undone(run_id: str, trip: dict) -> list[str]:
    summary = drain(run_id)
    assert (summary["status"], summary["compensation"]) == ("cancelled", "compensated")
    return [entry for entry in trip["log"] if entry.startswith("undo")]


def test_admin__the_cancel_page_offers_compensation_and_the_run_is_undone(
    admin_client: Any, waiting: str, trip: dict
):
    page = admin_client.get(operation_url(waiting, "cancel")).content.decode()
    assert 'name="compensate"' in page and "Undo completed steps first" in page

    admin_client.post(operation_url(waiting, "cancel"), {"reason": "trip off", "compensate": "on"})

    assert undone(waiting, trip) == ["undo hotel-1", "undo flight-1"]


def test_admin__a_cancel_left_unticked_undoes_nothing(admin_client: Any, waiting: str, trip: dict):
    admin_client.post(operation_url(waiting, "cancel"), {"reason": "trip off"})

    run = WorkflowRun.objects.get(pk=waiting)
    assert (run.status, run.compensation) == (RunStatus.CANCELLED, None)
    assert not any(entry.startswith("undo") for entry in trip["log"])


def test_api__cancel_with_compensate_undoes_and_audits_it(
    admin_user: Any, waiting: str, trip: dict
):
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post(f"{API}runs/{waiting}/cancel/", {"compensate": True}, format="json")

    assert response.status_code == 200
    assert response.json()["compensation"] == "running"
    assert WorkflowAuditEntry.objects.get(run_id=waiting, action="cancel").payload["compensate"]
    assert undone(waiting, trip) == ["undo hotel-1", "undo flight-1"]


def test_api__bulk_cancel_with_compensate_undoes_each_run(
    admin_user: Any, waiting: str, trip: dict
):
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post(
        f"{API}runs/bulk/cancel/", {"id": [waiting], "compensate": True}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["done_count"] == 1
    assert undone(waiting, trip) == ["undo hotel-1", "undo flight-1"]


def test_api__a_flag_the_bulk_operation_does_not_take_is_refused(admin_user: Any, waiting: str):
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post(
        f"{API}runs/bulk/suspend/", {"id": [waiting], "compensate": True}, format="json"
    )

    assert response.status_code == 400
    assert "compensate" in response.json()["fields"]
    assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.RUNNING


@pytest.mark.parametrize("value", ["maybe", 2, None, [True]])
def test_api__a_compensate_that_is_not_a_boolean_is_invalid_input_and_changes_nothing(
    admin_user: Any, waiting: str, value: Any
):
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post(f"{API}runs/{waiting}/cancel/", {"compensate": value}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.RUNNING


def test_cli__cancel_compensate_undoes(admin_user: Any, waiting: str, trip: dict):
    out = StringIO()
    call_command(
        "pikku",
        "cancel",
        waiting,
        "--reason",
        "trip off",
        "--as",
        "admin",
        "--compensate",
        stdout=out,
    )

    assert undone(waiting, trip) == ["undo hotel-1", "undo flight-1"]
