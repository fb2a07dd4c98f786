"""In a real browser at a laptop's 1366x768: the dashboard's charts of the demo's own runs draw
(SVG, no script), fit the window, and a chart's title opens the run list it summarises. With
PIKKU_SAVE_SCREENSHOT=1 it refreshes `docs/dashboard.png`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F, Q
from django.urls import reverse

from pikku_workflows.models import WorkflowRun
from tests.browser.test_admin__laptop import LAPTOP, overflow
from tests.browser.test_admin__laptop import runs as runs  # the fixture
from tests.browser.test_admin__retry import CHROMIUM, screenshot_path
from tests.browser.test_admin__retry import browser as browser  # the fixture
from tests.browser.test_admin__retry import operator as operator  # the fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]

DASHBOARD = reverse("admin:pikku_workflows_workflowrun_dashboard")


@pytest.fixture
def spread(runs: dict[str, str]) -> dict[str, str]:
    """The demo's runs spread over the last day, as if they had come in through it."""
    for hours, run_id in enumerate(runs.values()):
        earlier = timedelta(hours=3 * hours)
        WorkflowRun.objects.filter(Q(pk=run_id) | Q(parent_run_id=run_id)).update(
            created_at=F("created_at") - earlier,
            finished_at=F("finished_at") - earlier + timedelta(minutes=20 * hours),
        )
    return runs


def test_the_dashboard_draws_the_demo_runs(
    live_server: Any, spread: dict[str, str], browser: Any, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    page = browser.new_page(viewport=LAPTOP)
    page.goto(f"{live_server.url}/admin/login/?next={DASHBOARD}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret!")
    page.click("input[type=submit]")
    charts = page.locator(".pikku-dashboard-chart")
    expect(charts).to_have_count(6)
    assert overflow(page) == 0
    for svg in page.locator("svg.pikku-chart").all():
        assert svg.bounding_box()["width"] > 300
    assert page.locator("svg.pikku-chart rect").count() > 0
    page.screenshot(path=str(screenshot_path("dashboard.png", tmp_path)), full_page=True)

    page.click("#chart-3 h2 a")  # failure rate by workflow
    page.locator("#result_list").wait_for()
    expect(page.locator("#result_list td.field-now_column").first).to_contain_text("STEP_FAILED")
