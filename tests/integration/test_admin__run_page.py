"""The run page: summary (waiting on, error, progress, related runs), the timeline chart of
step attempts, the steps, the audit trail, all in a fixed number of queries and with no
external assets."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowWorker
from tests.admin_support import change_url
from tests.factories import WorkflowRunFactory, WorkflowStepFactory, WorkflowStepHistoryFactory
from tests.shop import Shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def flaky(shop: Shop) -> dict[str, int]:
    """`admin_tests.flaky` fails its first two attempts; a workflow calls it with retries."""
    seen = {"attempts": 0}

    @pw.step_function("admin_tests.flaky")
    def call(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
        seen["attempts"] += 1
        if ctx.attempt < 3:
            raise TimeoutError(f"upstream timed out (attempt {ctx.attempt})")
        return {"ok": True}

    @pw.workflow("admin_tests.flaky_flow")
    def flow(wf: pw.Workflow, input: dict[str, Any]) -> Any:
        wf.do("prepare", "admin_tests.reserve", {})
        return wf.do("call", "admin_tests.flaky", {}, retries=3, retry_delay=0)

    return seen


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip())


def field(response: Any, name: str) -> str:
    """The text of a read-only summary field of the run page."""
    content = response.content.decode()
    match = re.search(rf'<div class="form-row field-{name}">(.*?)</div>\s*</div>', content, re.S)
    assert match is not None, name
    return text_of(match.group(1))


def test_summary__of_a_run_waiting_on_a_timer(admin_client, shop):
    run = shop.start(sleep="1h")

    response = admin_client.get(change_url(run))

    assert field(response, "waiting") == "Waiting on: timer cool-off in 1 h"
    assert field(response, "progress") == "Progress: 2 / 3"
    assert "so far" in field(response, "duration")
    # Fields that say nothing about this run are left out.
    content = response.content.decode()
    for name in ("error_display", "finished", "started_by", "subject_link"):
        assert f"field-{name}" not in content


def test_summary__of_a_failed_run_shows_its_error_with_the_traceback_folded(admin_client, shop):
    run = shop.failed()

    response = admin_client.get(change_url(run))

    error = field(response, "error_display")
    assert error.startswith("Error: STEP_FAILED Step 'charge' failed: gateway down (attempt 1)")
    content = response.content.decode()
    assert '<details class="pikku-traceback"><summary>Traceback</summary>' in content
    assert "ConnectionError: gateway down (attempt 1)" in content  # inside the traceback
    assert "field-waiting" not in content  # an ended run waits on nothing


def test_summary__links_parent_and_child_runs(admin_client, shop):
    parent = shop.start(invoice="1h")
    child = WorkflowRun.objects.get(parent_run=parent)

    parent_page = admin_client.get(change_url(parent))
    child_page = admin_client.get(change_url(child))

    assert field(parent_page, "related_runs") == (
        f"Related runs: child {str(child.pk)[:8]} admin_tests.invoice Running"
    )
    assert f'href="{change_url(child)}"' in parent_page.content.decode()
    assert field(child_page, "related_runs").startswith(
        f"Related runs: parent {str(parent.pk)[:8]}"
    )
    assert f'href="{change_url(parent)}"' in child_page.content.decode()
    # The parent's step links to its child run too.
    [step] = [s for s in parent_page.context["steps"] if s["key"] == "invoice"]
    assert change_url(child) in step["child"]


def test_timeline__one_lane_per_step_and_a_bar_per_attempt_phase(admin_client, flaky):
    run_id = pw.start_workflow("admin_tests.flaky_flow", {}, inline=True)

    response = admin_client.get(change_url(run_id))

    chart = response.context["timeline"]
    assert [lane.step_key for lane in chart.lanes] == ["prepare", "call"]
    call = chart.lanes[1]
    ran = [bar for bar in call.bars if bar.phase == "running"]
    assert [bar.outcome for bar in ran] == ["failed", "failed", "succeeded"]
    assert [bar.title.split(" · ")[1] for bar in ran] == ["attempt 1", "attempt 2", "attempt 3"]
    # Bars are placed in percent of the run's span, in order, within the chart.
    lefts = [float(bar.left) for bar in call.bars]
    assert lefts == sorted(lefts)
    assert all(0 <= float(bar.left) <= 100 and float(bar.width) >= 0 for bar in call.bars)
    assert chart.ticks[0].label == "0"
    content = response.content.decode()
    assert content.count('class="pikku-bar pikku-bar-running pikku-bar-failed"') == 2
    assert 'class="pikku-bar pikku-bar-running pikku-bar-succeeded"' in content


def test_timeline__marks_operator_actions(admin_client, admin_user, shop):
    run = shop.start(sleep="1h")
    pw.suspend_run(run.pk, reason="stock check", by=admin_user)

    chart = admin_client.get(change_url(run)).context["timeline"]

    [mark] = chart.marks
    assert (mark.label, mark.title) == ("suspend", "suspend by admin: stock check")


def test_audit_trail__lists_operator_actions(admin_client, admin_user, shop):
    run = shop.start(sleep="1h")
    pw.suspend_run(run.pk, reason="stock check", by=admin_user)
    pw.cancel_run(run.pk, reason="out of stock", by=admin_user)

    response = admin_client.get(change_url(run))

    trail = response.context["audit_trail"]
    # Newest first: the last thing that happened to the run is what a reader looks for.
    assert [(row["action"], row["user"], row["reason"]) for row in trail] == [
        ("cancel", "admin", "out of stock"),
        ("suspend", "admin", "stock check"),
    ]
    assert text_of(str(trail[0]["change"])) == "Suspended → Cancelled"
    assert text_of(str(trail[1]["change"])) == "Running → Suspended"


def test_audit_trail__of_a_fork_links_the_new_run(admin_client, admin_user, shop):
    run = shop.start()
    fork_id = pw.fork_run(run.pk, from_step="ship", by=admin_user)

    response = admin_client.get(change_url(run))

    [row] = response.context["audit_trail"]
    assert row["action"] == "fork"
    assert change_url(fork_id) in str(row["new_run"])
    assert field(response, "related_runs").startswith(f"Related runs: fork {fork_id[:8]}")


def test_run_page__uses_no_external_assets(admin_client, shop):
    content = admin_client.get(change_url(shop.failed())).content.decode()

    assert not re.search(r'(src|href)="(https?:)?//', content)


# The run page's queries, with one step or fifteen: a query added to the page shows here.
RUN_PAGE_QUERIES = 17


def test_run_page__query_count_does_not_grow_with_steps_or_audit_entries(admin_client, admin_user):
    def run_with(count: int) -> WorkflowRun:
        run = WorkflowRunFactory(parent_run=WorkflowRunFactory(), forked_from=WorkflowRunFactory())
        WorkflowRunFactory(parent_run=run)
        for index in range(count):
            step = WorkflowStepFactory(run=run, step_key=f"s{index}", attempt=2, history=False)
            WorkflowStepHistoryFactory(step=step, attempt=1, status="failed")
            WorkflowStepHistoryFactory(step=step, attempt=2)
            run.audit_entries.create(action="note", user=admin_user, reason=f"r{index}")
        return run

    def count_queries(run: WorkflowRun) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(change_url(run)).status_code == 200
        return len(queries)

    # The admin's change form caches its model's content type in the process: the first page a
    # process shows reads it, whichever test that is. Read here, every count is the page's own.
    ContentType.objects.get_for_model(WorkflowRun)

    assert count_queries(run_with(1)) == count_queries(run_with(15)) == RUN_PAGE_QUERIES


def silent_banner(response: Any) -> str:
    content = response.content.decode()
    match = re.search(
        r'<ul class="messagelist pikku-silent-workers"[^>]*>(.*?)</ul>', content, re.S
    )
    text = text_of(match.group(1)) if match else ""
    return re.sub(r"\(\s+", "(", re.sub(r"\s+([,.;:)])", r"\1", text))


@pytest.mark.parametrize(("seen_ago", "named"), [(45, True), (5, False)])
def test_run_page__names_a_silent_worker_and_when_its_lease_lapses(admin_client, seen_ago, named):
    """The worker running `charge` was killed 45 s ago (3 missed heartbeats are 30 s): the page
    says which worker, and when the step runs again; a live worker's step says nothing."""
    now = timezone.now()
    WorkflowWorker.objects.create(
        host="worker-1",
        pid=4242,
        cluster="pikku",
        started_at=now - timedelta(minutes=5),
        last_seen_at=now - timedelta(seconds=seen_ago),
    )
    step = WorkflowStepFactory(
        step_key="charge",
        status="running",
        attempt_limit=6,
        lease_expires_at=now + timedelta(seconds=15),
        history__worker="worker-1:4242",
    )

    banner = silent_banner(admin_client.get(change_url(step.run)))

    if not named:
        assert banner == ""
        return
    # Seconds pass while the page renders (a loaded machine): 45 s may read 46 s.
    assert re.fullmatch(
        r"Step charge attempt 1 runs on pikku_worker worker-1:4242, not seen for 4\d s \(killed, "
        r"hung or cut off from the database\): its lease lapses in 1\d s, then another worker "
        r"runs the step again as attempt 2\.",
        banner,
    ), banner


def test_run_page__a_lapsed_attempt_ends_as_lease_lapsed(admin_client):
    lapsed = {"code": "STEP_LEASE_EXPIRED", "message": "Step 'charge' attempt 1: lease lapsed"}
    step = WorkflowStepFactory(step_key="charge", status="running", attempt=2, history=False)
    WorkflowStepHistoryFactory(
        step=step, attempt=1, status="failed", error=lapsed, worker="worker-1:4242"
    )
    WorkflowStepHistoryFactory(step=step, attempt=2, status="running", worker="worker-2:7")
    step.lease_expires_at = timezone.now() - timedelta(seconds=30)
    step.save()
    WorkflowWorker.objects.create(
        host="worker-2",
        pid=7,
        cluster="pikku",
        started_at=timezone.now() - timedelta(minutes=5),
        last_seen_at=timezone.now() - timedelta(minutes=2),
    )

    response = admin_client.get(change_url(step.run))

    history = response.content.decode().split('id="attempt-history"')[1].split("</table>")[0]
    rows = [text_of(row) for row in re.findall(r"<tr>(.*?)</tr>", history, re.S)[1:]]
    assert rows[0].startswith("charge 1 lease lapsed") and "worker-1:4242" in rows[0]
    assert rows[1].startswith("charge 2 Running") and "worker-2:7" in rows[1]
    assert re.fullmatch(
        r"Step charge attempt 2: its lease lapsed 3\d s ago \(pikku_worker worker-2:7 went "
        r"silent\); another "
        r"worker runs the step again as attempt 3\.",
        silent_banner(response),
    ), silent_banner(response)
