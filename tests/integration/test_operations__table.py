"""The operations table is the one list of operator actions: every row is offered by the admin,
the API and the `pikku` command, each through the row's own function and permission, and a row
added to the table reaches the adapters without another list to edit."""

from __future__ import annotations

import dataclasses
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import RequestFactory
from django.urls import reverse
from rest_framework.routers import SimpleRouter

import pikku_workflows as pw
from pikku_workflows.admin import OPERATIONS
from pikku_workflows.api import bulk
from pikku_workflows.api.views import RunViewSet, with_operation_routes
from pikku_workflows.engine.operations.control import CANCEL, OPERATION_RULES
from pikku_workflows.management.commands.pikku import Command
from pikku_workflows.models import WorkflowRun
from tests.shop import Shop

BULK_ROWS = [rule for rule in OPERATION_RULES.values() if rule.bulk]


def cli_verbs() -> dict[str, Any]:
    parser = Command().create_parser("manage.py", "pikku")
    subparsers = next(a for a in parser._actions if a.dest == "command")
    return dict(subparsers.choices)


def test_table__every_permission_is_a_permission_of_the_run_model():
    declared = {codename for codename, _ in WorkflowRun._meta.permissions}
    assert {rule.permission for rule in OPERATION_RULES.values()} <= declared


@pytest.mark.django_db
def test_table__every_row_is_an_admin_operation_and_every_bulk_row_an_action(admin_user):
    from django.contrib import admin

    run_admin = admin.site._registry[WorkflowRun]
    request = RequestFactory().get("/")
    request.user = admin_user

    assert {name: op.engine_rule for name, op in OPERATIONS.items()} == OPERATION_RULES
    offered = run_admin.get_actions(request)
    # Holds change no status, so they are no row of the table: their two actions follow it.
    assert [name for name in offered if name != "delete_selected"] == [
        *(f"{rule.action}_runs" for rule in BULK_ROWS),
        "hold_runs",
        "release_runs",
    ]
    for rule in OPERATION_RULES.values():
        reverse("admin:pikku_workflows_workflowrun_operation", args=[uuid.uuid4(), rule.action])


def test_table__every_row_is_an_api_route_and_every_bulk_row_a_bulk_operation():
    for rule in OPERATION_RULES.values():
        reverse(f"pikku_workflows_api:run-{rule.action}", args=[uuid.uuid4()])
    assert list(bulk.RULES.values()) == BULK_ROWS


def test_table__every_row_is_a_pikku_verb_and_only_fork_asks_for_a_step():
    verbs = cli_verbs()
    for rule in OPERATION_RULES.values():
        options = {option.dest for option in verbs[rule.action]._actions}
        assert ("from_step" in options) is not rule.bulk


def test_table__a_new_bulk_row_becomes_an_api_route_with_its_permission(monkeypatch):
    pause = dataclasses.replace(CANCEL, action="pause", permission="pause_workflowrun")
    monkeypatch.setitem(bulk.RULES, "pause", pause)
    monkeypatch.setitem(OPERATION_RULES, "pause", pause)

    probe = with_operation_routes(type("ProbeRunViewSet", (RunViewSet,), {}))
    router = SimpleRouter()
    router.register("runs", probe, basename="probe")
    names = {pattern.name for pattern in router.urls}
    view = probe()
    view.action = "pause"

    assert "probe-pause" in names
    assert view.required_permission() == "pause_workflowrun"


@pytest.mark.django_db
def test_table__a_new_row_becomes_a_pikku_verb_calling_its_function(
    monkeypatch, shop: Shop, admin_user
):
    run = shop.start(sleep="1h")
    called: list[tuple[Any, dict[str, Any]]] = []

    def pause_run(run_id: Any, **options: Any) -> dict[str, Any]:
        called.append((run_id, options))
        return {**pw.get_run_status(run_id), "status": "paused"}

    pause = dataclasses.replace(
        CANCEL, action="pause", function=pause_run, permission="pause_workflowrun", flags=()
    )
    monkeypatch.setitem(OPERATION_RULES, "pause", pause)

    out = StringIO()
    call_command("pikku", "pause", str(run.pk), "--reason", "why", "--as", "admin", stdout=out)

    assert called == [(str(run.pk), {"by": admin_user, "reason": "why"})]
    assert "is paused (pause as admin)" in out.getvalue()
