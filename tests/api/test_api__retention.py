"""Retention in the API: `POST runs/{id}/hold/` and `release/` (with `hold_workflowrun`), and a
purged run answering 410 RUN_PURGED to who could have read it (404 to anyone else)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.querysets import DatabaseNow
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


def _purged(run) -> None:
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=DatabaseNow() - timedelta(days=40))
    assert pw.purge_runs(older_than="30d")["runs"] >= 1


@pytest.fixture
def keeper(make_user):
    return make_user("keeper", "view_workflowrun", "hold_workflowrun")


def test_hold__keeps_the_run_from_purges_until_released(shop, keeper, client_for):
    run = shop.start()
    api = client_for(keeper)

    held = api.post(f"{API}runs/{run.pk}/hold/", {"reason": "audit"}, format="json")
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=DatabaseNow() - timedelta(days=40))
    assert pw.purge_runs(older_than="30d")["runs"] == 0
    released = api.post(f"{API}runs/{run.pk}/release/", format="json")

    assert held.status_code == released.status_code == 200
    assert held.json()["id"] == str(run.pk)
    entries = WorkflowAuditEntry.objects.filter(run=run, action__in=["hold", "release"])
    assert [(e.action, e.user, e.reason) for e in entries.order_by("id")] == [
        ("hold", keeper, "audit"),
        ("release", keeper, ""),
    ]
    assert pw.purge_runs(older_than="30d")["runs"] == 1


def test_hold__needs_the_hold_permission(shop, operator_api):
    run = shop.start()

    response = operator_api.post(f"{API}runs/{run.pk}/hold/", format="json")

    assert response.status_code == 403
    assert not WorkflowRun.objects.get(pk=run.pk).retention_hold


@pytest.mark.parametrize("path", ["", "timeline/", "state/"])
def test_purged_run__reads_answer_410(shop, operator_api, path):
    run = shop.start()
    _purged(run)

    response = operator_api.get(f"{API}runs/{run.pk}/{path}")

    assert response.status_code == 410
    assert response.json()["code"] == "RUN_PURGED"


@pytest.mark.parametrize("operation", ["retry", "cancel", "hold"])
def test_purged_run__operations_answer_410(shop, keeper, operator, client_for, operation):
    run = shop.start()
    _purged(run)
    api = client_for(keeper if operation == "hold" else operator)

    response = api.post(f"{API}runs/{run.pk}/{operation}/", format="json")

    assert response.status_code == 410


def test_purged_run__its_starter_is_told_and_others_are_not(shop, alice, make_user, client_for):
    run = shop.start(user=alice)
    _purged(run)

    assert client_for(alice).get(f"{API}runs/{run.pk}/").status_code == 410
    assert client_for(make_user("bob")).get(f"{API}runs/{run.pk}/").status_code == 404


def test_purged_run__is_a_404_where_the_host_narrows_runs(shop, operator_api):
    run = shop.start()
    _purged(run)

    with override_settings(PIKKU_WORKFLOWS={"RUN_QUERYSET_FILTER": lambda request, runs: runs}):
        response = operator_api.get(f"{API}runs/{run.pk}/")

    assert response.status_code == 404


def test_purged_run__a_start_with_its_idempotency_key_answers_410(shop, operator_api, worker):
    url = f"{API}definitions/{shop.workflow}/runs/"
    body = {"input": {}, "idempotency_key": "order-7"}
    first = worker(lambda: operator_api.post(url, body, format="json"))
    _purged(WorkflowRun.objects.get(pk=first.json()["id"]))

    again = operator_api.post(url, body, format="json")

    assert again.status_code == 410
    assert str(first.json()["id"]) in again.json()["detail"]
