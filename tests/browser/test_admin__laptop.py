"""In a real browser at a laptop's 1366x768: the run list and the run pages of the demo's own
workflows fit. Nothing is clipped or off-screen (every list column, a step's input JSON, an
approval decision's data, the graph), the operator buttons keep clear of the title, a settled
run does not show the inbox's count, and a completed run whose body skipped a planned step
reads as done. With PIKKU_SAVE_SCREENSHOT=1 it refreshes the pictures of the docs (`docs/
run-list.png`, `run-page.png`, `run-page-steps.png`, `run-page-graph.png`), each 1366x768.

As in test_admin__retry.py: the system's Chromium, and no worker (`drain` does its work).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowRun
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain
from project.demo.management.commands.seed_demo import MANAGERS_GROUP
from tests.admin_support import CHANGELIST, change_url
from tests.browser.test_admin__retry import CHROMIUM, screenshot_path
from tests.browser.test_admin__retry import browser as browser  # the fixture
from tests.browser.test_admin__retry import operator as operator  # the fixture

LAPTOP = {"width": 1366, "height": 768}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]


def order(order_id: int, amount: float, **scenario: Any) -> dict[str, Any]:
    return {"order_id": order_id, "items": ["book", "lamp"], "amount": amount, **scenario}


def demo_runs(operator: Any) -> dict[str, str]:
    """The demo's own workflows, in the states its scenarios reach."""
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name=MANAGERS_GROUP)[0].user_set.add(operator)
    clerk = get_user_model().objects.create_user("clerk")
    runs = {
        "small": pw.start_workflow("order_fulfilment", order(1, 42.0), started_by=operator),
        "declined": pw.start_workflow(
            "order_fulfilment", order(2, 12.0, declines=9, charge_retries=1)
        ),
        "large": pw.start_workflow("order_fulfilment", order(3, 1200.0), started_by=clerk),
        "review": pw.start_workflow("order_fulfilment", order(4, 250.0, needs_review=True)),
        "signup": pw.start_workflow(
            "onboarding",
            {"name": "Linus Torvalds", "email": "linus@example.com", "teams": ["kernel", "git"]},
        ),
    }
    drain(advance="1m")
    approval = WorkflowApproval.objects.get(run_id=runs["large"])
    pw.decide_approval(
        approval.pk,
        approve=True,
        by=operator,
        comment="Loyal customer: 10 % off, gift wrapped",
        data={"discount_percent": 10, "note": "gift wrap, deliver to the side door"},
    )
    drain(advance="1m")
    runs["waiting"] = pw.start_workflow("order_fulfilment", order(5, 900.0), started_by=clerk)
    drain(runs["waiting"])
    runs["approval"] = str(WorkflowApproval.objects.get(run_id=runs["waiting"]).pk)
    return runs


@pytest.fixture
def runs(operator: Any) -> dict[str, str]:
    built = demo_runs(operator)
    assert WorkflowRun.objects.get(pk=built["large"]).status == RunStatus.COMPLETED
    return built


@pytest.fixture
def laptop(live_server: Any, runs: dict[str, str], browser: Any) -> Any:
    page = browser.new_page(viewport=LAPTOP)
    page.goto(f"{live_server.url}/admin/login/?next={CHANGELIST}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret!")
    page.click("input[type=submit]")
    page.locator("#result_list").wait_for()
    return page


def overflow(page: Any) -> int:
    """How far the page is wider than the window (0: no horizontal scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


def right(found: dict[str, float]) -> float:
    return found["x"] + found["width"]


def test_the_run_list_fits_a_laptop(laptop, runs, tmp_path):
    page = laptop
    assert overflow(page) == 0
    for column in ("id", "status", "workflow", "started", "waiting on / error"):
        header = page.locator("#result_list thead th", has_text=column.upper())
        assert header.count() == 1, column
        assert right(header.bounding_box()) <= LAPTOP["width"], column
    # A failed run's error and a live run's wait share the last column, both on screen.
    row = page.locator("#result_list tr", has=page.locator(f"input[value='{runs['declined']}']"))
    assert "STEP_FAILED" in row.locator("td.field-now_column").inner_text()
    row = page.locator("#result_list tr", has=page.locator(f"input[value='{runs['waiting']}']"))
    assert "APPROVAL" in row.locator("td.field-now_column").inner_text()
    # The small order never needed its manager: done, not "5 / 6".
    row = page.locator("#result_list tr", has=page.locator(f"input[value='{runs['small']}']"))
    assert row.locator(".pikku-progress").inner_text() == "5 / 5 (1 skipped)"
    page.screenshot(path=str(screenshot_path("run-list.png", tmp_path)))


def test_the_run_page_fits_a_laptop(laptop, live_server, runs, tmp_path):
    page = laptop
    page.goto(f"{live_server.url}{change_url(runs['large'])}")
    assert overflow(page) == 0
    # Another run's approval waits for the operator: this settled run does not say so.
    assert page.locator("#pending-approvals").count() == 0
    page.screenshot(path=str(screenshot_path("run-page.png", tmp_path)))

    # Each step's input and result are readable, not a column of single characters.
    for cell in page.locator("#steps .pikku-json").all():
        assert cell.evaluate("e => e.clientWidth") >= 150
        assert cell.evaluate("e => e.scrollWidth <= e.clientWidth")
    # So is the manager's decision: its data wraps by words.
    data = page.locator("#approvals .pikku-decisions .pikku-json")
    assert data.evaluate("e => e.clientWidth") >= 150
    assert "gift wrap" in data.inner_text()
    page.locator("#steps").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_path("run-page-steps.png", tmp_path)))

    page.goto(f"{live_server.url}{change_url(runs['signup'])}")
    graph = box(page, "svg.pikku-graph")
    assert right(graph) <= right(box(page, ".field-graph")) and overflow(page) == 0
    page.locator(".field-graph").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_path("run-page-graph.png", tmp_path)))


def test_the_buttons_of_a_live_run_keep_clear_of_its_title(laptop, live_server, runs):
    page = laptop
    page.goto(f"{live_server.url}{change_url(runs['waiting'])}")

    tools, title = box(page, "#content-main > .object-tools"), box(page, "#content h2")
    assert page.locator("#content-main > .object-tools li").count() >= 4  # refresh, cancel, ...
    assert tools["y"] >= title["y"] + title["height"], (tools, title)
    assert right(tools) <= LAPTOP["width"] and overflow(page) == 0
    # Its own approval waits for the operator: that, and only that, is counted here.
    assert page.locator("#pending-approvals").inner_text() == (
        "1 approval of this run waits for your decision"
    )


# Each control of a submit row: its box, and the middle of its words (an input's are centred).
LINE_UP = """
row => [...row.children].map(control => {
    const box = control.getBoundingClientRect();
    let words = box;
    if (control.tagName !== "INPUT") {
        const range = document.createRange();
        range.selectNodeContents(control);
        words = range.getBoundingClientRect();
    }
    return [Math.round(box.top), Math.round(box.bottom), Math.round(words.top + words.height / 2)];
})
"""


def aligned(page: Any) -> bool:
    """Whether the buttons and links of the page's submit row line up: the same box, and their
    words on one line in its middle."""
    controls = page.locator(".submit-row").evaluate(LINE_UP)
    assert len(controls) >= 2, controls
    tops, bottoms, middles = zip(*controls, strict=True)
    box_middle = (tops[0] + bottoms[0]) / 2
    return len(set(tops)) == len(set(bottoms)) == 1 and all(
        abs(middle - box_middle) <= 2 for middle in middles
    )


def test_the_buttons_of_the_confirmation_pages_line_up(laptop, live_server, runs, tmp_path):
    page = laptop
    page.goto(f"{live_server.url}{change_url(runs['waiting'])}")
    page.click("a.pikku-op-cancel")
    page.locator(".submit-row").wait_for()
    assert aligned(page), page.locator(".submit-row").evaluate(LINE_UP)
    page.screenshot(path=str(tmp_path / "confirm.png"))

    decide = reverse("admin:pikku_workflows_workflowapproval_decide", args=[runs["approval"]])
    page.goto(f"{live_server.url}{decide}")
    page.locator(".submit-row").wait_for()
    assert aligned(page), page.locator(".submit-row").evaluate(LINE_UP)
    page.screenshot(path=str(tmp_path / "decide.png"))
