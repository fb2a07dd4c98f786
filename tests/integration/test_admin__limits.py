"""Named limits in the admin: the code's limits listed with their live usage, and an edit of a
rate that the next start takes (and later deploys leave alone)."""

from __future__ import annotations

from html import unescape

import pytest
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowLimit, WorkflowRun

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:pikku_workflows_workflowlimit_changelist")


@pytest.fixture
def limited() -> None:
    pw.define_limit("admin_limits.vendor", rate="1/h")

    @pw.workflow("admin_limits.call", limits=["admin_limits.vendor"])
    def call(wf, input):
        return input


def test_limits__the_list_shows_code_limits_with_what_their_rate_holds_queued(
    admin_client, limited
):
    pw.start_workflow("admin_limits.call", {})
    pw.start_workflow("admin_limits.call", {})

    content = unescape(admin_client.get(CHANGELIST).content.decode())

    assert "admin_limits.vendor" in content
    assert "1/h" in content
    row = WorkflowLimit.objects.get(name="admin_limits.vendor")
    assert row.managed_by == "code"
    assert '<td class="field-queued">1</td>' in content


def test_limits__an_edit_is_the_operator_s_and_the_next_start_takes_it(admin_client, limited):
    pw.start_workflow("admin_limits.call", {})
    admin_client.get(CHANGELIST)
    row = WorkflowLimit.objects.get(name="admin_limits.vendor")

    response = admin_client.post(
        reverse("admin:pikku_workflows_workflowlimit_change", args=[row.pk]),
        {"rate": "1000/s", "burst": "0"},
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    row.refresh_from_db()
    assert (row.rate, row.managed_by) == ("1000/s", "admin")
    second = pw.start_workflow("admin_limits.call", {})
    assert WorkflowRun.objects.get(pk=second).status == "running"


def test_limits__a_bad_rate_is_a_form_error_and_changes_nothing(admin_client, limited):
    admin_client.get(CHANGELIST)
    row = WorkflowLimit.objects.get(name="admin_limits.vendor")

    response = admin_client.post(
        reverse("admin:pikku_workflows_workflowlimit_change", args=[row.pk]),
        {"rate": "10/x", "burst": "0"},
    )

    assert response.status_code == 200
    assert 'must look like "10/s"' in unescape(response.content.decode())
    row.refresh_from_db()
    assert (row.rate, row.managed_by) == ("1/h", "code")


def test_limits__max_running_is_edited_in_the_form_and_a_bad_one_changes_nothing(admin_client):
    pw.define_limit("admin_limits.slots", max_running=2)
    admin_client.get(CHANGELIST)
    row = WorkflowLimit.objects.get(name="admin_limits.slots")
    change = reverse("admin:pikku_workflows_workflowlimit_change", args=[row.pk])

    bad = admin_client.post(change, {"rate": "", "burst": "0", "max_running": "0"})
    row.refresh_from_db()
    unchanged = (row.max_running, row.managed_by)
    good = admin_client.post(change, {"rate": "", "burst": "0", "max_running": "4"})

    assert bad.status_code == 200
    assert "max_running of limit 'admin_limits.slots' must be" in unescape(bad.content.decode())
    assert unchanged == (None, "code")
    assert good.status_code == 302, good.content.decode()[:2000]
    row.refresh_from_db()
    assert (row.max_running, row.managed_by, row.rate) == (4, "admin", "")
    assert "0 / 4" in unescape(admin_client.get(CHANGELIST).content.decode())
