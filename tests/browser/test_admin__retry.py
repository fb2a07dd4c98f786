"""In a real browser: an operator logs in, opens a failed run, retries it from the run page,
confirms with a reason, and sees the run complete. With PIKKU_SAVE_SCREENSHOT=1 it refreshes `docs/run-page.png`.

Playwright drives the system's Chromium (`apt-get install chromium`; `playwright install`
cannot download browsers here). No worker runs in this test: after the click the test runs
the queued orchestrator pass itself (`tests.queue.drain_queue`), as a worker would.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus
from tests.admin_support import change_url
from tests.queue import drain_queue

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The README's picture is refreshed only on request, so a test run leaves the tree clean.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "run-page.png"

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
def failed_run(order_workflow: None, django_user_model: Any) -> str:
    django_user_model.objects.create_superuser("operator", "operator@example.com", "s3cret!")
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


def test_retry_a_failed_run_from_the_run_page(live_server, failed_run, browser, tmp_path):
    from playwright.sync_api import expect

    run_id = failed_run
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/admin/login/?next={change_url(run_id)}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret!")
    page.click("input[type=submit]")
    status = page.locator(".field-run_status .readonly")
    expect(status).to_have_text("Failed")
    expect(page.locator(".field-error_display")).to_contain_text("payment gateway unreachable")

    GATEWAY["down"] = False  # the fix is deployed
    page.click("a.pikku-op-retry")
    expect(page.locator("#content-main h2").first).to_have_text("1 run will be retried")
    page.fill("textarea[name=reason]", "Gateway is back up")
    page.click("input[type=submit][value='Yes, retry 1 run']")
    expect(page.locator(".messagelist")).to_contain_text("Retried 1 run")
    expect(status).to_have_text("Running")

    # What a worker would do: run the orchestrator pass the retry queued.
    assert in_thread(drain_queue) == [("pikku_workflows.tasks.orchestrate", (run_id,))]
    page.reload()

    expect(status).to_have_text("Completed")
    expect(page.locator("#audit-trail")).to_contain_text("Gateway is back up")
    expect(page.locator("#timeline .pikku-bar-running.pikku-bar-failed")).to_have_count(2)
    expect(page.locator("#timeline .pikku-mark")).to_have_count(3)  # the retry, on each lane
    output = in_thread(lambda: WorkflowRun.objects.get(pk=run_id).output)
    assert output == {"charge": "ch_42", "tracking": "TRK000042"}

    # The picture for the README: summary, timeline, steps and audit trail, without the nav.
    page.click("#toggle-nav-sidebar")
    expect(page.locator("#nav-sidebar")).to_be_hidden()
    audit = page.locator("#audit-trail").bounding_box()
    assert audit is not None
    screenshot = (
        DOCS_SCREENSHOT if os.environ.get("PIKKU_SAVE_SCREENSHOT") else tmp_path / "run.png"
    )
    # The box is relative to the viewport, which the click may have scrolled.
    bottom = audit["y"] + page.evaluate("window.scrollY") + audit["height"] + 16
    page.screenshot(
        path=str(screenshot), full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": bottom}
    )
    assert screenshot.stat().st_size > 10_000
