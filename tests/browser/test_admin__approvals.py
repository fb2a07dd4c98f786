"""In a real browser: a manager logs in, sees on the admin index that an approval waits for
them, opens the inbox, decides with the approval's form and a comment, and watches the run
complete on its run page. With PIKKU_SAVE_SCREENSHOT=1 it refreshes `docs/approvals-inbox.png`.

As in test_admin__retry.py: the system's Chromium, and no worker: after the click the test runs
the queued orchestrator pass itself, as a worker would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django import forms

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.admin_support import change_url
from tests.approvals import person
from tests.browser.test_admin__retry import CHROMIUM, in_thread
from tests.browser.test_admin__retry import browser as browser  # the fixture
from tests.queue import drain_queue

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "approvals-inbox.png"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]


class Discount(forms.Form):
    discount_percent = forms.IntegerField(min_value=0, max_value=30, required=False)


@pytest.fixture
def waiting_run(django_user_model: Any) -> str:
    @pw.step_function("browser.charge_order")
    def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
        return {"charged": round(data["amount"] * (100 - data["discount"]) / 100, 2)}

    @pw.workflow("browser.large_order")
    def large_order(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
        decision = wf.approval(
            "manager-approval",
            approvers=["group:managers"],
            exclude_requester=True,
            expires_in="2d",
            form=Discount,
            summary=f"Order #42 for {input['amount']:.2f} needs a manager's approval",
            data={"amount": input["amount"]},
        )
        if not decision.approved:
            return {"rejected": decision.comment}
        discount = decision.data.get("discount_percent") or 0
        return wf.do(
            "charge", "browser.charge_order", {"amount": input["amount"], "discount": discount}
        )

    manager = person("manager", "managers", perms=("view_workflowrun", "view_workflowapproval"))
    manager.set_password("s3cret!")
    manager.is_staff = True
    manager.save()
    clerk = person("clerk", "managers")
    return pw.start_workflow(
        "browser.large_order", {"amount": 1200.0}, inline=True, started_by=clerk
    )


def test_approve_from_the_inbox_with_a_comment_and_watch_the_run_complete(
    live_server, waiting_run, browser, tmp_path
):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "manager")
    page.fill("#id_password", "s3cret!")
    page.click("input[type=submit]")

    # The admin index says what waits; the inbox lists it, assigned to me.
    expect(page.locator("#pending-approvals")).to_contain_text("1 approval waits for your decision")
    page.click("#pending-approvals a")
    expect(page.locator("#approvals-for-me")).to_contain_text("1 approval waits for your decision")
    row = page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Order #42 for 1200.00 needs a manager's approval")
    expect(row).to_contain_text("browser.large_order")
    screenshot = (
        DOCS_SCREENSHOT if os.environ.get("PIKKU_SAVE_SCREENSHOT") else tmp_path / "inbox.png"
    )
    page.screenshot(path=str(screenshot), full_page=True)

    row.locator("a.pikku-decide").click()
    expect(page.locator("#approval-request")).to_contain_text("1200")
    page.fill("input[name=data-discount_percent]", "10")
    page.fill("textarea[name=comment]", "Good customer: 10 % off")
    page.click("button.pikku-approve")
    expect(page.locator(".messagelist")).to_contain_text("Approved manager-approval")
    expect(page.locator("#approvals-for-me")).to_contain_text("Nothing waits for your decision")

    # What a worker would do: run the orchestrator pass the decision queued.
    assert in_thread(drain_queue) == [("pikku_workflows.tasks.orchestrate", (waiting_run,))]
    page.goto(f"{live_server.url}{change_url(waiting_run)}")

    expect(page.locator(".field-run_status .readonly")).to_have_text("Completed")
    approvals = page.locator("#approvals")
    expect(approvals).to_contain_text("Good customer: 10 % off")
    expect(approvals).to_contain_text("Approved")
    expect(page.locator("#audit-trail")).to_contain_text("approve")
    # The approval's wait is a bar on its lane; the decision a mark on every lane.
    expect(page.locator("#timeline .pikku-bar.pikku-bar-waiting")).to_have_count(1)
    expect(page.locator("#timeline .pikku-mark-label")).to_have_text(["approve"])
    run = in_thread(lambda: WorkflowRun.objects.get(pk=waiting_run))
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"charged": 1080.0})
    approval = in_thread(lambda: WorkflowApproval.objects.get(run_id=waiting_run))
    assert (approval.comment, approval.data) == (
        "Good customer: 10 % off",
        {"discount_percent": 10},
    )
