"""The approvals inbox and decide page in the admin: pending first, "assigned to me" by
default, overdue highlighted, workflow / subject / summary shown; deciding with the approval's
form (valid and invalid), a comment, Approve / Reject; refusals; the pending count on the admin
index and the run page; a run's approvals with every decision; the "awaiting approval" filter."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django import forms
from django.test import Client
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowApprovalDecision, WorkflowAuditEntry
from pikku_workflows.status import ApprovalStatus, RunStatus
from project.demo.models import Order
from tests.admin_support import CHANGELIST as RUNS
from tests.admin_support import change_url, listed_ids
from tests.approvals import approval_of, past_deadline, person
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db

INBOX = reverse("admin:pikku_workflows_workflowapproval_changelist")
INDEX = reverse("admin:index")
FORM = "tests.integration.test_admin__approvals.ShipmentDecision"


class ShipmentDecision(forms.Form):
    carrier = forms.ChoiceField(choices=[("dhl", "DHL"), ("ups", "UPS")])
    insured = forms.BooleanField(required=False)


def decide_url(approval: WorkflowApproval) -> str:
    return reverse("admin:pikku_workflows_workflowapproval_decide", args=[approval.pk])


def text_of(response: Any) -> str:
    html = response.content.decode()
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def row_with(html: str, text: str) -> str:
    """The one table row of `html` that contains `text`."""
    (row,) = [row for row in re.findall(r"<tr[^>]*>.*?</tr>", html, re.S) if text in row]
    return row


def client_of(user: Any) -> Client:
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def gated(django_user_model) -> dict[str, Any]:
    """Orders whose fulfilment waits on approvals: one for the managers (about an order, with
    a form, due in a day), one for finance, one the managers already approved."""

    @pw.workflow("admin_approvals.ship")
    def ship(wf, input):
        outcome = wf.approval(
            "ship",
            approvers=input["approvers"],
            expires_in="1d",
            form=input.get("form"),
            summary=input["summary"],
            data={"order": input["order"]},
        )
        return {"approved": outcome.approved, "data": outcome.data}

    manager = person("manager", "managers", perms=("view_workflowrun",))
    order = Order.objects.create(customer="Grace Hopper", amount=1200)
    runs = {
        "mine": pw.start_workflow(
            "admin_approvals.ship",
            {"approvers": ["group:managers"], "summary": "Ship order 1", "order": 1, "form": FORM},
            inline=True,
            subject=order,
        ),
        "finance": pw.start_workflow(
            "admin_approvals.ship",
            {"approvers": ["group:finance"], "summary": "Refund order 2", "order": 2},
            inline=True,
        ),
        "done": pw.start_workflow(
            "admin_approvals.ship",
            {"approvers": ["group:managers"], "summary": "Ship order 3", "order": 3},
            inline=True,
        ),
    }
    approvals = {key: approval_of(run_id, "ship") for key, run_id in runs.items()}
    pw.decide_approval(approvals["done"].pk, approve=True, by=manager)
    return {"manager": manager, "order": order, "runs": runs, "approvals": approvals}


# --- the inbox ----------------------------------------------------------------------------


def test_inbox__assigned_to_me_by_default_everyone_with_pending_first(gated):
    client = client_of(gated["manager"])
    approvals = gated["approvals"]

    mine = client.get(INBOX)
    everyone = client.get(INBOX, {"assigned": "all"})

    assert [a.pk for a in mine.context["cl"].result_list] == [approvals["mine"].pk]
    listed = [a.pk for a in everyone.context["cl"].result_list]
    assert set(listed[:2]) == {approvals["mine"].pk, approvals["finance"].pk}  # pending first
    assert listed[2] == approvals["done"].pk
    assert "1 approval waits for your decision" in text_of(mine)


def test_inbox__shows_workflow_subject_summary_and_a_decide_button(gated):
    response = client_of(gated["manager"]).get(INBOX)

    text = text_of(response)
    assert "admin_approvals.ship" in text
    assert "Order #" in text and "Grace Hopper" in text
    assert "Ship order 1" in text
    assert decide_url(gated["approvals"]["mine"]) in response.content.decode()


def test_inbox__overdue_approvals_are_highlighted(gated):
    past_deadline(gated["approvals"]["mine"])
    client = client_of(gated["manager"])

    listed = client.get(INBOX, {"assigned": "all"}).content.decode()

    assert 'class="pikku-overdue"' in row_with(listed, "Ship order 1")
    assert "pikku-overdue" not in row_with(listed, "Refund order 2")


def test_inbox__deciders_see_it_without_the_model_view_permission():
    decider = person("decider", "managers")  # decide, nothing else
    client = client_of(decider)

    assert client.get(INBOX).status_code == 200
    assert "Workflow approvals" in text_of(client.get(INDEX))


def test_inbox__staff_who_may_neither_view_nor_decide_are_refused():
    client = client_of(person("visitor", decide=False))

    assert client.get(INBOX).status_code == 403


# --- the decide page ----------------------------------------------------------------------


def test_decide_page__renders_the_form_a_comment_and_both_buttons(gated):
    response = client_of(gated["manager"]).get(decide_url(gated["approvals"]["mine"]))

    html = response.content.decode()
    assert response.status_code == 200
    assert 'name="data-carrier"' in html and 'name="data-insured"' in html
    assert 'name="comment"' in html
    assert 'value="approve"' in html and 'value="reject"' in html
    assert "&quot;order&quot;: 1" in html  # what is asked


def test_decide_page__approve_with_a_comment_records_it_and_the_run_completes(
    gated, django_capture_on_commit_callbacks
):
    approval = gated["approvals"]["mine"]

    with django_capture_on_commit_callbacks(execute=True):
        response = client_of(gated["manager"]).post(
            decide_url(approval),
            {"decision": "approve", "comment": "ship it today", "data-carrier": "ups"},
        )

    assert response.status_code == 302 and response.url == INBOX
    decision = WorkflowApprovalDecision.objects.get(approval=approval)
    assert (decision.username, decision.approve, decision.comment, decision.data) == (
        "manager",
        True,
        "ship it today",
        {"carrier": "ups", "insured": False},
    )
    drain_queue()
    run = approval.run
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"approved": True, "data": {"carrier": "ups", "insured": False}}


def test_decide_page__invalid_form_data_shows_its_errors_and_leaves_it_pending(gated):
    approval = gated["approvals"]["mine"]

    response = client_of(gated["manager"]).post(
        decide_url(approval), {"decision": "approve", "data-carrier": "pigeon"}
    )

    assert response.status_code == 200
    assert response.context["data_form"].errors["carrier"]
    assert "Select a valid choice" in text_of(response)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not approval.decisions.exists()


def test_decide_page__reject_without_a_form_takes_optional_json(gated):
    finance = person("treasurer", "finance")
    approval = gated["approvals"]["finance"]

    response = client_of(finance).post(
        decide_url(approval),
        {"decision": "reject", "comment": "not refundable", "json_data": '{"policy": "R-7"}'},
    )

    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.comment, approval.data) == (
        ApprovalStatus.REJECTED,
        "not refundable",
        {"policy": "R-7"},
    )


def test_decide_page__json_nested_too_deep_to_parse_is_a_form_error(gated):
    finance = person("treasurer", "finance")
    approval = gated["approvals"]["finance"]
    deep = "[" * 100_000 + "]" * 100_000

    response = client_of(finance).post(
        decide_url(approval), {"decision": "reject", "json_data": deep}
    )

    assert response.status_code == 200
    assert "nested deeper than 256 levels" in text_of(response)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_decide_page__someone_not_allowed_sees_why_and_a_forged_post_is_denied(gated):
    approval = gated["approvals"]["finance"]
    client = client_of(gated["manager"])

    page = client.get(decide_url(approval))
    forged = client.post(decide_url(approval), {"decision": "approve"}, follow=True)

    assert "You may not decide this approval" in text_of(page)
    assert 'value="approve"' not in page.content.decode()
    assert "APPROVAL_FORBIDDEN" in text_of(forged)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert WorkflowAuditEntry.objects.filter(action="deny", user=gated["manager"]).count() == 1


def test_decide_page__a_settled_approval_says_so(gated):
    page = client_of(gated["manager"]).get(decide_url(gated["approvals"]["done"]))

    assert "nothing left to decide" in text_of(page)
    assert 'value="approve"' not in page.content.decode()


def test_approval_page__read_only_with_every_decision(gated):
    approval = gated["approvals"]["done"]
    url = reverse("admin:pikku_workflows_workflowapproval_change", args=[approval.pk])

    response = client_of(gated["manager"]).get(url)

    assert response.status_code == 200
    assert 'name="_save"' not in response.content.decode()
    assert "manager Approved" in text_of(response)


# --- counts, the run page and the run list ------------------------------------------------


def test_admin_index__shows_how_many_approvals_wait_for_me(gated, django_user_model):
    assert "1 approval waits for your decision" in text_of(client_of(gated["manager"]).get(INDEX))
    nobody = person("nobody", decide=False, perms=("view_workflowrun",))
    assert "waits for your decision" not in text_of(client_of(nobody).get(INDEX))


def test_run_page__lists_its_approvals_with_every_decision_and_my_pending_count(gated):
    client = client_of(gated["manager"])

    done = client.get(change_url(gated["runs"]["done"]))
    waiting = client.get(change_url(gated["runs"]["mine"]))

    (row,) = done.context["approvals"]
    assert row["approval"].status == ApprovalStatus.APPROVED
    assert "manager" in row["decisions"] and "Approved" in row["decisions"]
    assert 'id="approvals"' in done.content.decode()
    assert "1 approval of this run waits for your decision" in text_of(waiting)
    # A settled run's page does not count the inbox's other approvals.
    assert "waits for your decision" not in text_of(done)
    (pending,) = waiting.context["approvals"]
    assert pending["decide_url"] == decide_url(gated["approvals"]["mine"])
    assert pending["deciders"] == "May decide: manager"


def test_run_list__awaiting_approval_filter_and_waiting_column(gated, admin_client):
    runs = gated["runs"]
    drain_queue()

    awaiting = listed_ids(admin_client.get(RUNS, {"awaiting_approval": "yes"}))
    others = listed_ids(admin_client.get(RUNS, {"awaiting_approval": "no"}))

    assert {str(pk) for pk in awaiting} == {runs["mine"], runs["finance"]}
    assert str(next(iter(others))) == runs["done"] or runs["done"] in {str(pk) for pk in others}
    text = text_of(admin_client.get(RUNS))
    assert "approval ship due in 1 d" in text or "approval ship due in 24 h" in text
