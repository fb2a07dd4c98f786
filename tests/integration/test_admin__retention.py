"""Retention in the admin: hold and release actions (with `hold_workflowrun`), the run page
saying a run is held, and a purged run's page landing on its tombstone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.querysets import DatabaseNow
from tests.admin_support import CHANGELIST, change_url, staff_client

pytestmark = pytest.mark.django_db


def _messages(response: Any) -> list[str]:
    return [str(m.message) for m in get_messages(response.wsgi_request)]


def _select(client: Any, action: str, runs: list[WorkflowRun]) -> Any:
    data = {"action": action, "_selected_action": [str(run.pk) for run in runs]}
    return client.post(CHANGELIST, data)


def test_hold_action__holds_the_selected_runs_and_audits_each(admin_client, admin_user, shop):
    first, second = shop.start(), shop.start()
    pw.hold_run(second.pk)

    response = _select(admin_client, "hold_runs", [first, second])

    assert response.status_code == 302
    assert _messages(response) == ["1 run(s) held from purges."]
    assert WorkflowRun.objects.filter(retention_hold=True).count() == 2
    assert WorkflowAuditEntry.objects.get(run=first, action="hold").user == admin_user


def test_release_action__lets_purges_take_them_again(admin_client, shop):
    run = shop.start()
    pw.hold_run(run.pk)

    _select(admin_client, "release_runs", [run])

    assert not WorkflowRun.objects.get(pk=run.pk).retention_hold


def test_hold_actions__are_offered_only_with_the_hold_permission(django_user_model, shop):
    shop.start()
    viewer = staff_client(django_user_model, "viewer", "view_workflowrun")
    keeper = staff_client(django_user_model, "keeper", "view_workflowrun", "hold_workflowrun")

    assert "hold_runs" not in viewer.get(CHANGELIST).content.decode()
    assert "hold_runs" in keeper.get(CHANGELIST).content.decode()
    assert "release_runs" in keeper.get(CHANGELIST).content.decode()


def test_run_page__says_a_held_run_is_held(admin_client, shop):
    run = shop.start()
    assert "Held: never purged" not in admin_client.get(change_url(run)).content.decode()

    pw.hold_run(run.pk)

    assert "Held: never purged" in admin_client.get(change_url(run)).content.decode()


def test_run_page__of_a_purged_run_lands_on_its_tombstone(admin_client, shop):
    run = shop.start()
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=DatabaseNow() - timedelta(days=40))
    pw.purge_runs(older_than="30d")

    response = admin_client.get(change_url(run), follow=True)

    tombstone_url = reverse("admin:pikku_workflows_workflowruntombstone_change", args=[run.pk])
    assert response.redirect_chain == [(tombstone_url, 302)]
    assert f"Run {run.pk} was purged on" in _messages(response)[0]
    page = response.content.decode()
    assert shop.workflow in page and "Completed" in page


def test_tombstones__are_listed_and_read_only(admin_client, shop):
    run = shop.start()
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=DatabaseNow() - timedelta(days=40))
    pw.purge_runs(older_than="30d")

    listing = admin_client.get(reverse("admin:pikku_workflows_workflowruntombstone_changelist"))
    page = admin_client.get(
        reverse("admin:pikku_workflows_workflowruntombstone_change", args=[run.pk])
    )

    assert str(run.pk) in listing.content.decode()
    assert 'name="_save"' not in page.content.decode()
