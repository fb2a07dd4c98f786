"""The admin at 3 a.m.: a failed run's error in the list, its subject, child runs marked and
hidden by default, a neutral reason for suspended and cancelled runs, engine-made steps shown as
what they are, each step's input, a disarmed timer "cancelled", newest audit first, a fork on
both runs, the stock History page showing operator actions, safe defaults for fork and cancel,
the auto-refresh toggle on live pages."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain
from project.demo.models import Order
from tests.admin_support import CHANGELIST, change_url, listed_ids, operation_url
from tests.shop import Shop

pytestmark = pytest.mark.django_db


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


def cell(content: str, run: WorkflowRun, column: str) -> str:
    rows = re.findall(r"<tr>.*?</tr>", content, flags=re.S)
    [row] = [row for row in rows if f'value="{run.pk}"' in row]
    match = re.search(rf'<td class="field-{column}">(.*?)</td>', row, flags=re.S)
    assert match is not None, column
    return match.group(1)


@pytest.fixture
def child_run(shop: Shop) -> tuple[WorkflowRun, WorkflowRun]:
    parent = shop.start(invoice="1h")
    return parent, WorkflowRun.objects.get(parent_run=parent)


def test_list__a_failed_run_shows_its_error_code_and_message_truncated(admin_client, shop):
    failed = shop.failed()
    WorkflowRun.objects.filter(pk=failed.pk).update(
        error={**failed.error, "message": "gateway down " + "x" * 200}
    )
    completed = shop.start()

    content = admin_client.get(CHANGELIST).content.decode()

    error = cell(content, failed, "now_column")  # "waiting on / error"
    assert '<code class="pikku-error-code">STEP_FAILED</code>' in error
    shown = text_of(error)
    assert shown.startswith("STEP_FAILED gateway down xxx") and shown.endswith("…")
    assert len(shown) < 100
    assert "x" * 200 in error  # the whole message as the tooltip
    assert text_of(cell(content, completed, "now_column")) == "-"


def test_list__the_subject_column_links_to_the_subject(admin_client, shop):
    order = Order.objects.create(customer="Ada", amount=Decimal("12.00"))
    run_id = pw.start_workflow("admin_tests.order", {}, inline=True, subject=order)

    content = admin_client.get(CHANGELIST).content.decode()

    subject = cell(content, WorkflowRun.objects.get(pk=run_id), "workflow_column")
    assert reverse("admin:demo_order_change", args=[order.pk]) in subject
    assert text_of(subject).replace(" ", "") == f"admin_tests.order{order}".replace(" ", "")


def test_list__child_runs_are_marked_and_only_top_level_runs_are_listed_at_first(
    admin_client, child_run
):
    parent, child = child_run

    assert listed_ids(admin_client.get(CHANGELIST)) == {parent.pk}
    assert listed_ids(admin_client.get(CHANGELIST, {"level": "children"})) == {child.pk}
    everything = admin_client.get(CHANGELIST, {"level": "all"})
    assert listed_ids(everything) == {parent.pk, child.pk}
    marked = text_of(everything.content.decode().split(f'value="{child.pk}"')[1][:600])
    assert f"child of {str(parent.pk)[:8]}" in marked
    # A search looks at every level: a child's id is findable.
    assert listed_ids(admin_client.get(CHANGELIST, {"q": str(child.pk)})) == {child.pk}
    filters = everything.content.decode()
    assert "Top-level runs" in filters and "All runs" in filters


def test_run_page__suspended_and_cancelled_runs_show_a_neutral_reason(
    admin_client, admin_user, shop
):
    run = shop.start(sleep="1h")
    pw.suspend_run(run.pk, reason="fraud check", by=admin_user)

    content = admin_client.get(change_url(run)).content.decode()

    assert "field-reason_display" in content and "field-error_display" not in content
    reason = content.split("field-reason_display")[1][:600]
    assert "fraud check" in reason and "WORKFLOW_SUSPENDED" not in reason
    pw.cancel_run(run.pk, reason="customer called", by=admin_user)
    content = admin_client.get(change_url(run)).content.decode()
    assert "customer called" in content.split("field-reason_display")[1][:600]
    assert "field-error_display" not in content


def test_run_page__a_missing_step_function_is_a_reason_with_its_code(admin_client):
    @pw.workflow("admin_tests.undeployed")
    def undeployed(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("charge", "admin_tests.not_deployed")

    run_id = pw.start_workflow("admin_tests.undeployed", {}, inline=True)

    reason = admin_client.get(change_url(run_id)).content.decode().split("field-reason_display")[1]
    assert '<code class="pikku-reason-code">RPC_NOT_FOUND</code>' in reason[:800]


def test_run_page__engine_steps_are_shown_as_such_and_never_offered_for_a_fork(admin_client):
    @pw.step_function("admin_tests.declined")
    def declined(data: Any, ctx: pw.StepContext) -> Any:
        raise ConnectionError("card declined")

    @pw.step_function("admin_tests.refund")
    def refund(data: Any, ctx: pw.StepContext) -> Any:
        return {"refunded": data["data"]["amount"]}

    @pw.workflow("admin_tests.compensated")
    def compensated(wf: pw.Workflow, input: Any) -> Any:
        wf.suspend("manual review")
        return wf.do(
            "charge",
            "admin_tests.declined",
            {"amount": 12},
            retries=0,
            on_error="admin_tests.refund",
        )

    run_id = pw.start_workflow("admin_tests.compensated", {}, inline=True)
    pw.resume_run(run_id)
    assert drain(run_id)["status"] == "failed"  # type: ignore[index]

    response = admin_client.get(change_url(run_id))
    steps = {step["key"]: step for step in response.context["steps"]}
    assert set(steps) == {"__suspend:manual review", "charge", "charge:onError"}
    assert text_of(str(steps["charge:onError"]["key_display"])) == "on_error of charge"
    assert text_of(str(steps["__suspend:manual review"]["key_display"])) == (
        "wf.suspend manual review"
    )
    assert steps["charge"]["fork_url"] is not None
    assert steps["charge:onError"]["fork_url"] is None
    assert steps["__suspend:manual review"]["fork_url"] is None
    # Each step's input is on the page.
    assert "&quot;amount&quot;: 12" in str(steps["charge"]["input"])
    # The fork page offers the body's own steps only.
    fork = admin_client.get(operation_url(run_id, "fork"))
    assert [key for key, _ in fork.context["form"].fields["from_step"].choices] == ["charge"]


def test_run_page__steps_come_before_the_timeline(admin_client, shop):
    content = admin_client.get(change_url(shop.start())).content.decode()

    assert content.index('id="steps"') < content.index('id="timeline"')
    assert content.index('id="timeline"') < content.index('id="audit-trail"')


def test_run_page__a_timer_the_cancel_disarmed_says_cancelled(admin_client, shop):
    run = shop.start(sleep="1h")
    pw.cancel_run(run.pk)

    steps = {step["key"]: step for step in admin_client.get(change_url(run)).context["steps"]}

    assert text_of(str(steps["cool-off"]["status"])) == "Cancelled"
    assert text_of(str(steps["charge"]["status"])) == "Succeeded"


def test_run_page__a_fork_is_recorded_on_both_runs(admin_client, admin_user, shop):
    source = shop.start()
    fork_id = pw.fork_run(source.pk, from_step="ship", by=admin_user, reason="redo shipping")

    [row] = admin_client.get(change_url(fork_id)).context["audit_trail"]

    assert (row["action"], row["reason"]) == ("fork", "redo shipping")
    assert change_url(source) in str(row["source_run"])


def test_history__the_stock_history_page_lists_operator_actions(admin_client, admin_user, shop):
    run = shop.failed()
    pw.retry_run(run.pk, by=admin_user, reason="gateway is back")

    history = reverse("admin:pikku_workflows_workflowrun_history", args=[run.pk])
    content = admin_client.get(history).content.decode()

    assert "retry (failed → running): gateway is back" in content
    assert LogEntry.objects.filter(object_id=str(run.pk)).count() == 1


def test_fork__defaults_to_the_failed_step_and_lists_what_runs_again(admin_client, shop):
    run = shop.failed()

    response = admin_client.get(operation_url(run, "fork"))

    assert response.context["form"]["from_step"].value() == "charge"
    assert response.context["fork"]["again"] == ["charge"]
    content = response.content.decode()
    assert "Steps that execute again" in content
    assert "side effects" in content and "invocation ids" in content
    # "Fork from here" asks for a step; the preview follows.
    chosen = admin_client.get(operation_url(run, "fork"), {"from_step": "reserve"})
    assert chosen.context["form"]["from_step"].value() == "reserve"
    assert chosen.context["fork"]["again"] == ["reserve", "charge"]


def test_fork__of_a_completed_run_defaults_to_its_last_step(admin_client, shop):
    run = shop.start()

    response = admin_client.get(operation_url(run, "fork"))

    assert response.context["form"]["from_step"].value() == "ship"
    assert response.context["fork"]["again"] == ["ship"]


def test_cancel__the_confirmation_says_completed_steps_stay_done_unless_compensated(
    admin_client, shop
):
    run = shop.start(sleep="1h")

    content = admin_client.get(operation_url(run, "cancel")).content.decode()

    assert "Unless you ask for compensation, completed steps are not undone" in content


def test_auto_refresh__offered_on_the_list_and_live_run_pages_only(admin_client, shop):
    live, ended = shop.start(sleep="1h"), shop.start()

    assert 'id="pikku-auto-refresh"' in admin_client.get(CHANGELIST).content.decode()
    live_page = admin_client.get(change_url(live)).content.decode()
    assert 'id="pikku-auto-refresh"' in live_page
    assert "pikku_workflows/admin.js" in live_page  # our own script: no external assets
    assert 'id="pikku-auto-refresh"' not in admin_client.get(change_url(ended)).content.decode()
