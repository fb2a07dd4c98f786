"""The read-only admins of workflow versions and the audit log; steps have no admin of their own."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import NoReverseMatch, reverse

from pikku_workflows.models import WorkflowAuditEntry, WorkflowStep, WorkflowVersion
from tests.factories import WorkflowRunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def version() -> WorkflowVersion:
    return WorkflowVersion.objects.create(
        name="onboarding",
        graph_hash="0123456789abcdef0123",
        kind=WorkflowVersion.Kind.GRAPH,
        definition={"entry": ["validate"], "nodes": {"validate": {"function": "users.validate"}}},
    )


@pytest.fixture
def audit_entry(admin_user) -> WorkflowAuditEntry:
    run = WorkflowRunFactory(workflow="order_fulfilment")
    return WorkflowAuditEntry.objects.create(
        run=run,
        action="cancel",
        user=admin_user,
        reason="customer asked",
        payload={"status_before": "running", "status_after": "cancelled"},
    )


def test_versions__list_and_page_show_the_definition(admin_client, version):
    listing = admin_client.get(reverse("admin:pikku_workflows_workflowversion_changelist"))
    page = admin_client.get(
        reverse("admin:pikku_workflows_workflowversion_change", args=[version.pk])
    )

    assert listing.status_code == 200
    assert "0123456789ab" in listing.content.decode()
    assert page.status_code == 200
    assert '<pre class="pikku-json">{\n  &quot;entry&quot;: [' in page.content.decode()
    assert 'name="_save"' not in page.content.decode()


def test_audit_log__list_links_to_the_run_and_page_shows_the_payload(admin_client, audit_entry):
    run_url = reverse("admin:pikku_workflows_workflowrun_change", args=[audit_entry.run_id])

    listing = admin_client.get(reverse("admin:pikku_workflows_workflowauditentry_changelist"))
    page = admin_client.get(
        reverse("admin:pikku_workflows_workflowauditentry_change", args=[audit_entry.pk])
    )

    assert listing.status_code == 200
    assert run_url in listing.content.decode()
    assert "customer asked" in listing.content.decode()
    assert page.status_code == 200
    assert "&quot;status_after&quot;: &quot;cancelled&quot;" in page.content.decode()


@pytest.mark.parametrize(
    ("term", "found"),
    [("customer", True), ("order_fulfilment", True), ("admin", True), ("nobody", False)],
)
def test_audit_log__search_by_reason_workflow_or_user(admin_client, audit_entry, term, found):
    response = admin_client.get(
        reverse("admin:pikku_workflows_workflowauditentry_changelist"), {"q": term}
    )

    assert (audit_entry in response.context["cl"].result_list) is found


def test_audit_log__search_by_run_id_or_prefix(admin_client, audit_entry):
    url = reverse("admin:pikku_workflows_workflowauditentry_changelist")
    other = WorkflowAuditEntry.objects.create(run=WorkflowRunFactory(), action="suspend")

    for term in (str(audit_entry.run_id), str(audit_entry.run_id)[:8]):
        listed = list(admin_client.get(url, {"q": term}).context["cl"].result_list)
        assert listed == [audit_entry]
    assert other not in listed


@pytest.mark.parametrize("model", ["workflowversion", "workflowauditentry"])
def test_read_only_models__add_change_and_delete_are_refused(
    admin_client, version, audit_entry, model
):
    obj = version if model == "workflowversion" else audit_entry
    change = reverse(f"admin:pikku_workflows_{model}_change", args=[obj.pk])
    delete = reverse(f"admin:pikku_workflows_{model}_delete", args=[obj.pk])

    assert admin_client.get(reverse(f"admin:pikku_workflows_{model}_add")).status_code == 403
    assert admin_client.post(change, {"reason": "edited", "name": "edited"}).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    obj.refresh_from_db()  # still there
    assert "edited" not in (getattr(obj, "name", ""), getattr(obj, "reason", ""))


def test_steps__have_no_admin_of_their_own():
    assert not admin.site.is_registered(WorkflowStep)
    with pytest.raises(NoReverseMatch):
        reverse("admin:pikku_workflows_workflowstep_changelist")
