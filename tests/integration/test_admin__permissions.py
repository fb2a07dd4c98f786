"""Who may do what in the run admin: every operator action needs its own model permission;
staff without it see neither the bulk action nor the button, and a forged request is refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.admin_support import (
    CHANGELIST,
    OPERATION_PERMISSIONS,
    change_url,
    operation_url,
    staff_client,
)
from tests.shop import Shop

pytestmark = pytest.mark.django_db

BULK_ACTIONS = ["cancel_runs", "suspend_runs", "resume_runs", "retry_runs"]


@pytest.fixture
def running(shop: Shop) -> WorkflowRun:
    return shop.start(sleep="1h")


@pytest.fixture
def failed(shop: Shop) -> WorkflowRun:
    return shop.failed()


def action_choices(client: Client) -> list[str]:
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    form = response.context["action_form"]
    if form is None:
        return []
    return [name for name, _ in form.fields["action"].choices if name]


def buttons(client: Client, run: WorkflowRun) -> list[str]:
    response = client.get(change_url(run))
    assert response.status_code == 200
    return [op["name"] for op in response.context["run_operations"]]


def status_of(run: WorkflowRun) -> str:
    return WorkflowRun.objects.values_list("status", flat=True).get(pk=run.pk)


def test_superuser__has_every_action_and_button(admin_client, running, failed):
    assert action_choices(admin_client) == [*BULK_ACTIONS, "hold_runs", "release_runs"]
    assert buttons(admin_client, running) == ["cancel", "suspend"]
    assert buttons(admin_client, failed) == ["retry", "fork"]


def test_staff_with_every_operation_permission__same_as_superuser(
    django_user_model, running, failed
):
    client = staff_client(django_user_model, "ops", "view_workflowrun", *OPERATION_PERMISSIONS)

    assert action_choices(client) == BULK_ACTIONS
    assert buttons(client, running) == ["cancel", "suspend"]
    assert buttons(client, failed) == ["retry", "fork"]


@pytest.mark.parametrize("operation", ["cancel", "suspend", "resume", "retry", "fork"])
def test_staff_with_one_operation_permission__gets_that_one_only(
    django_user_model, shop, operation
):
    client = staff_client(django_user_model, "ops", "view_workflowrun", f"{operation}_workflowrun")
    run = {
        "cancel": lambda: shop.start(sleep="1h"),
        "suspend": lambda: shop.start(sleep="1h"),
        "resume": lambda: shop.start(review=True),
        "retry": shop.failed,
        "fork": shop.start,
    }[operation]()

    assert action_choices(client) == ([] if operation == "fork" else [f"{operation}_runs"])
    assert buttons(client, run) == [operation]
    assert client.get(operation_url(run, operation)).status_code == 200
    others = {"cancel", "suspend", "resume", "retry", "fork"} - {operation}
    for other in others:
        assert client.get(operation_url(run, other)).status_code == 403


def test_staff_with_cancel_permission__cancels_but_a_forged_suspend_is_refused(
    django_user_model, shop
):
    client = staff_client(django_user_model, "ops", "view_workflowrun", "cancel_workflowrun")
    run, other = shop.start(sleep="1h"), shop.start(sleep="1h")

    forged = client.post(
        CHANGELIST,
        {"action": "suspend_runs", "_selected_action": [str(other.pk)], "confirmed": "yes"},
    )
    assert forged.status_code == 302  # "No action selected." and back to the list
    assert status_of(other) == RunStatus.RUNNING
    assert client.post(operation_url(other, "suspend"), {"reason": "x"}).status_code == 403
    assert status_of(other) == RunStatus.RUNNING

    client.post(operation_url(run, "cancel"), {"reason": "allowed"})
    assert status_of(run) == RunStatus.CANCELLED


def test_view_only_staff__sees_runs_but_no_actions_or_buttons(django_user_model, running, failed):
    client = staff_client(django_user_model, "viewer", "view_workflowrun")

    assert action_choices(client) == []
    content = client.get(CHANGELIST).content.decode()
    assert 'name="_selected_action"' not in content
    assert buttons(client, running) == []
    assert buttons(client, failed) == []
    assert "operations/" not in client.get(change_url(failed)).content.decode()


def test_view_only_staff__forged_requests_change_nothing(django_user_model, running, failed):
    client = staff_client(django_user_model, "viewer", "view_workflowrun")

    for action in BULK_ACTIONS:
        response = client.post(
            CHANGELIST,
            {
                "action": action,
                "_selected_action": [str(running.pk), str(failed.pk)],
                "confirmed": "yes",
                "index": "0",
            },
        )
        assert response.status_code in (200, 302)
    for run, operation in [(running, "cancel"), (running, "suspend"), (failed, "retry")]:
        assert client.get(operation_url(run, operation)).status_code == 403
        assert client.post(operation_url(run, operation), {"reason": "x"}).status_code == 403
    assert client.post(operation_url(failed, "fork"), {"from_step": "reserve"}).status_code == 403

    assert (status_of(running), status_of(failed)) == (RunStatus.RUNNING, RunStatus.FAILED)
    assert not WorkflowAuditEntry.objects.exists()
    assert not WorkflowRun.objects.filter(forked_from=failed).exists()


def test_operation_permission_without_view_permission__is_refused(django_user_model, running):
    client = staff_client(django_user_model, "blind", "cancel_workflowrun")

    assert client.get(CHANGELIST).status_code == 403
    assert client.get(operation_url(running, "cancel")).status_code == 403
    assert client.post(operation_url(running, "cancel")).status_code == 403
    assert status_of(running) == RunStatus.RUNNING


def test_non_staff__is_sent_to_the_login_page(django_user_model, running):
    user: Any = django_user_model.objects.create_user("customer", password="x")
    user.user_permissions.add(*Permission.objects.filter(codename="cancel_workflowrun"))
    client = Client()
    client.force_login(user)

    response = client.post(operation_url(running, "cancel"))

    assert response.status_code == 302
    assert "/login/" in response["Location"]
    assert status_of(running) == RunStatus.RUNNING
