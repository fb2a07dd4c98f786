"""In a real browser: an operator finds a failed run by its error in the list, opens it, retries
it from the run page, confirms with a reason, and sees the run complete; watches the list refresh
itself; starts a run from the admin; and forks a failed run from the step that failed (the
pictures of the docs come from test_admin__laptop.py).

Playwright drives the system's Chromium (`apt-get install chromium`; `playwright install`
cannot download browsers here). No worker runs in these tests: after a click the test runs
what a worker would itself (`pikku_workflows.testing.drain`); a `WorkflowWorker` row stands in
for a live worker, so the pages show no "no timer loop" banner.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory, WorkflowWorker
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain
from tests.admin_support import CHANGELIST, change_url

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The pictures of the README and docs/ are refreshed only on request, so a test run leaves the tree clean.
DOCS = Path(__file__).resolve().parents[2] / "docs"
# The list's auto-refresh reloads every 5 s; give it two turns.
REFRESH_TIMEOUT_MS = 12_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]

# The payment gateway of the test workflow: down until the test says it is fixed.
GATEWAY = {"down": True}


@pytest.fixture
def order_workflow() -> Iterator[None]:
    @pw.step_function("browser.reserve")
    def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
        return {"reserved": data["items"]}

    @pw.step_function("browser.charge")
    def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
        if GATEWAY["down"]:
            raise ConnectionError(f"payment gateway unreachable (attempt {ctx.attempt})")
        return {"charge_id": "ch_42", "amount": data["amount"]}

    @pw.step_function("browser.ship")
    def ship(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
        return {"tracking": "TRK000042"}

    @pw.workflow("restock", planned_steps=["reserve", "cool-off", "ship"])
    def restock(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
        wf.do("reserve", "browser.reserve", {"items": input["items"]})
        wf.sleep("cool-off", "1h")
        return wf.do("ship", "browser.ship", {})

    @pw.workflow("checkout", planned_steps=["reserve", "charge", "ship"])
    def order(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
        wf.do("reserve", "browser.reserve", {"items": input["items"]})
        charged = wf.do(
            "charge", "browser.charge", {"amount": input["amount"]}, retries=1, retry_delay=0
        )
        return {"charge": charged["charge_id"], **wf.do("ship", "browser.ship", {})}

    GATEWAY["down"] = True
    yield
    GATEWAY["down"] = True


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    now = timezone.now()
    WorkflowWorker.objects.create(
        host="worker-1", pid=4242, cluster="pikku", started_at=now, last_seen_at=now
    )
    return django_user_model.objects.create_superuser("operator", "operator@example.com", "s3cret!")


@pytest.fixture
def failed_run(order_workflow: None, operator: Any) -> str:
    run_id = pw.start_workflow("checkout", {"items": ["lamp", "desk"], "amount": 120}, inline=True)
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.FAILED
    return run_id


def in_thread(work: Callable[[], Any]) -> Any:
    """Run database work off this thread: Playwright's sync API keeps an event loop running
    here, where Django refuses ORM calls (and would keep their connection in the loop's context).
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "database work did not finish in 60 s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


def log_in(browser: Any, live_server: Any, next_url: str) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret!")
    page.click("input[type=submit]")
    return page


def screenshot_path(name: str, tmp_path: Path) -> Path:
    return DOCS / name if os.environ.get("PIKKU_SAVE_SCREENSHOT") else tmp_path / name


def failed_hours_ago(run_id: str, hours: int) -> None:
    """The run failed at 3 a.m.: its times moved back, as if it had happened then."""
    earlier = timedelta(hours=hours)
    WorkflowRun.objects.filter(pk=run_id).update(
        created_at=F("created_at") - earlier, finished_at=F("finished_at") - earlier
    )
    WorkflowStep.objects.filter(run_id=run_id).update(created_at=F("created_at") - earlier)
    history = WorkflowStepHistory.objects.filter(step__run_id=run_id)
    for column in ("created_at", "running_at", "succeeded_at", "failed_at"):
        history.exclude(**{column: None}).update(**{column: F(column) - earlier})


def test_retry_a_failed_run_from_the_run_page(live_server, failed_run, browser, tmp_path):
    from playwright.sync_api import expect

    run_id = failed_run
    in_thread(lambda: failed_hours_ago(run_id, 5))
    page = log_in(browser, live_server, CHANGELIST)
    # The list says what went wrong, without opening the run.
    error = page.locator("#result_list td.field-now_column")
    expect(error).to_contain_text("STEP_FAILED")
    expect(error).to_contain_text("payment gateway unreachable")
    page.click(f"#result_list a[href^='{change_url(run_id)}']")
    status = page.locator(".field-run_status .readonly")
    expect(status).to_have_text("Failed")
    expect(page.locator(".field-error_display")).to_contain_text("payment gateway unreachable")

    GATEWAY["down"] = False  # the fix is deployed
    page.click("a.pikku-op-retry")
    expect(page.locator("#content-main h2").first).to_have_text("1 run will be retried")
    page.fill("textarea[name=reason]", "Gateway is back up")
    page.click("input[type=submit][value='Yes, retry 1 run']")
    expect(page.locator(".messagelist").first).to_contain_text("Retried 1 run")
    expect(status).to_have_text("Running")

    # What a worker would do: run the orchestrator pass the retry queued.
    assert in_thread(lambda: drain(run_id))["status"] == RunStatus.COMPLETED
    page.reload()

    expect(status).to_have_text("Completed")
    expect(page.locator("#audit-trail")).to_contain_text("Gateway is back up")
    expect(page.locator("#timeline .pikku-bar-running.pikku-bar-failed")).to_have_count(2)
    expect(page.locator("#timeline .pikku-mark")).to_have_count(3)  # the retry, on each lane
    # Retried five hours after it failed: the idle hours are a narrow break, both ends readable.
    expect(page.locator("#timeline .pikku-axis .pikku-break")).to_have_count(1)
    expect(page.locator("#timeline h2")).to_contain_text("idle stretches shortened")
    output = in_thread(lambda: WorkflowRun.objects.get(pk=run_id).output)
    assert output == {"charge": "ch_42", "tracking": "TRK000042"}


def test_the_run_list_refreshes_itself_while_auto_refresh_is_on(
    live_server, failed_run, browser, tmp_path
):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, CHANGELIST)
    page.check("#pikku-auto-refresh")
    GATEWAY["down"] = False
    started = in_thread(
        lambda: pw.start_workflow("checkout", {"items": ["chair"], "amount": 40}, inline=True)
    )

    # Nobody reloads: the page does, and the new run shows up on its own.
    row = page.locator("#result_list tr", has=page.locator(f"input[value='{started}']"))
    status = row.locator("td.field-status_column .pikku-badge")
    expect(status).to_have_text("Completed", timeout=REFRESH_TIMEOUT_MS)
    expect(page.locator("#pikku-auto-refresh")).to_be_checked()  # remembered across reloads


def test_start_a_run_from_the_admin(live_server, order_workflow, operator, browser):
    from playwright.sync_api import expect

    GATEWAY["down"] = False
    page = log_in(browser, live_server, CHANGELIST)
    page.click("a.pikku-op-start")
    page.check("input[name=workflow][value=checkout]")
    page.fill("textarea[name=input]", '{"items": ["lamp"], "amount": oops}')
    page.click("input[type=submit][name=start]")
    expect(page.locator(".errorlist")).to_contain_text("Not valid JSON")

    page.fill("textarea[name=input]", '{"items": ["lamp"], "amount": 25}')
    page.click("input[type=submit][name=start]")
    expect(page.locator(".messagelist").first).to_contain_text("Started run")
    run_id = in_thread(lambda: str(WorkflowRun.objects.get(workflow="checkout").pk))
    expect(page.locator(".field-started_by .readonly")).to_have_text("operator")
    assert in_thread(lambda: drain(run_id))["status"] == RunStatus.COMPLETED
    page.reload()
    expect(page.locator(".field-run_status .readonly")).to_have_text("Completed")


def test_fork_defaults_to_the_failed_step_and_shows_what_runs_again(
    live_server, failed_run, browser
):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, change_url(failed_run))
    page.click("a.pikku-op-fork")

    expect(page.locator("select[name=from_step]")).to_have_value("charge")
    again = page.locator("#pikku-fork-again li")
    expect(again).to_have_text(["charge"])
    expect(page.locator("#pikku-operation-warning")).to_contain_text("side effects")
    page.select_option("select[name=from_step]", "reserve")
    expect(again).to_have_text(["reserve", "charge"])  # the list follows the choice
