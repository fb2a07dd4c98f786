"""The run list: what each run waits on, the filters (waiting on, retrying, stuck, started),
search in the input, the runs-per-workflow-and-status summary, and a query count that stays flat."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pikku_workflows.engine.store.run_list_fields import refresh_list_fields
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.admin_support import CHANGELIST, change_url, listed_ids
from tests.factories import WorkflowRunFactory, WorkflowStepFactory
from tests.shop import Shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(shop: Shop) -> dict[str, WorkflowRun]:
    """A run in each state the engine reaches, plus runs with a live and a lapsed step lease."""
    built = {
        "completed": shop.start(items=["lamp", "desk"]),
        "failed": shop.failed(),
        "suspended": shop.start(review=True),
        "timer": shop.start(sleep="1h"),
        "retry": shop.failed(retries=3, retry_delay="1h"),
        "child": shop.start(invoice="1h"),
    }
    built["invoice"] = WorkflowRun.objects.get(parent_run=built["child"])
    now = timezone.now()
    for name, lease in (
        ("step", now + timedelta(minutes=1)),
        ("lease", now - timedelta(minutes=1)),
    ):
        built[name] = WorkflowRunFactory(workflow="admin_tests.order")
        WorkflowStepFactory(
            run=built[name],
            step_key="charge",
            status=StepStatus.RUNNING,
            lease_expires_at=lease,
        )
        refresh_list_fields(built[name].pk)  # as the pass that parked it on the step does
    return built


def row_of(content: str, run: WorkflowRun) -> str:
    """The HTML of the run's row in the list."""
    rows = re.findall(r"<tr>.*?</tr>", content, flags=re.S)
    # The link keeps the list's filters (`?_changelist_filters=level%3Dall`) when there are any.
    link = re.compile(rf'<th class="field-short_id"><a href="{change_url(run)}["?]')
    [row] = [row for row in rows if link.search(row)]
    return row


def waiting_cell(content: str, run: WorkflowRun) -> str:
    match = re.search(r'<td class="field-now_column">(.*?)</td>', row_of(content, run), flags=re.S)
    assert match is not None
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_list__columns(admin_client, runs):
    content = admin_client.get(CHANGELIST).content.decode()

    completed = row_of(content, runs["completed"])
    assert 'class="pikku-badge pikku-status-completed"' in completed
    assert "admin_tests.order" in completed
    assert "3 / 3" in completed  # progress: succeeded of planned steps
    assert " ago" in completed  # started
    assert " ms<" in completed or " s<" in completed  # duration
    assert "so far" in row_of(content, runs["timer"])
    assert "2 / 3" in row_of(content, runs["timer"])


def test_list__waiting_on_says_what_and_until_when(admin_client, runs):
    content = admin_client.get(CHANGELIST, {"level": "all"}).content.decode()

    assert waiting_cell(content, runs["completed"]) == "-"
    assert waiting_cell(content, runs["failed"]).startswith("STEP_FAILED ")  # its error instead
    assert waiting_cell(content, runs["suspended"]) == "suspend manual review"
    assert waiting_cell(content, runs["timer"]) == "timer cool-off in 1 h"
    assert waiting_cell(content, runs["retry"]) == "retry charge attempt 2 in 1 h"
    assert (
        waiting_cell(content, runs["child"]) == f"child invoice run {str(runs['invoice'].pk)[:8]}"
    )
    assert f'href="{change_url(runs["invoice"])}"' in row_of(content, runs["child"])
    assert waiting_cell(content, runs["invoice"]) == "timer render-later in 1 h"
    # Plain words: a step runs (for how long), a lapsed lease is a worker that went silent.
    assert waiting_cell(content, runs["step"]).startswith("running charge for ")
    # Seconds show below 10 min: a slow request reads "1 min 1 s ago".
    assert re.fullmatch(
        r"worker lost charge its worker went silent 1 min( \d+ s)? ago; another worker runs it again",
        waiting_cell(content, runs["lease"]),
    )
    assert 'class="pikku-wait pikku-wait-lease"' in row_of(content, runs["lease"])


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("step", {"step"}),
        ("timer", {"timer", "invoice"}),
        ("retry", {"retry"}),
        ("child", {"child"}),
        ("lease", {"lease"}),
        ("suspend", {"suspended"}),
    ],
)
def test_filter__waiting_on(admin_client, runs, kind, expected):
    response = admin_client.get(CHANGELIST, {"waiting_on": kind, "level": "all"})

    assert listed_ids(response) == {runs[name].pk for name in expected}


def test_filter__waiting_on_matches_the_column(admin_client, runs):
    content = admin_client.get(CHANGELIST, {"level": "all"}).content.decode()
    # What the column calls each kind: a busy step runs (or waits for a worker), a lapsed lease
    # is a lost worker.
    words = {"step": ("running", "queued"), "lease": ("worker lost",)}

    for kind in ("step", "timer", "retry", "child", "lease", "suspend"):
        params = {"waiting_on": kind, "level": "all"}
        for pk in listed_ids(admin_client.get(CHANGELIST, params)):
            assert waiting_cell(content, WorkflowRun(pk=pk)).startswith(words.get(kind, (kind,)))


def test_filter__retrying(admin_client, runs):
    backing_off = WorkflowRunFactory(workflow="admin_tests.order")
    WorkflowStepFactory(
        run=backing_off,
        status=StepStatus.FAILED,
        attempt=1,
        attempt_limit=3,
        wake_at=timezone.now() + timedelta(minutes=5),
    )
    refresh_list_fields(backing_off.pk)  # as the pass that parked it on the backoff does

    retrying = listed_ids(admin_client.get(CHANGELIST, {"retrying": "yes"}))
    not_retrying = listed_ids(admin_client.get(CHANGELIST, {"retrying": "no"}))

    assert retrying == {runs["retry"].pk, backing_off.pk}
    # The failed run's step is exhausted: it is not retrying.
    assert runs["failed"].pk in not_retrying
    assert retrying.isdisjoint(not_retrying)


def test_filter__stuck(admin_client, runs):
    long_ago = timezone.now() - timedelta(hours=1)
    stalled = WorkflowRunFactory(workflow="admin_tests.order")
    WorkflowStepFactory(run=stalled, step_key="done", status=StepStatus.SUCCEEDED)
    WorkflowStep.objects.filter(run=stalled).update(updated_at=long_ago)
    WorkflowRun.objects.filter(pk=stalled.pk).update(updated_at=long_ago)
    # A pass that died holding the run lease.
    abandoned = WorkflowRunFactory(
        workflow="admin_tests.order",
        lease_holder="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=5),
    )
    # Old but parked on a timer: in flight, not stalled.
    WorkflowRun.objects.filter(pk=runs["timer"].pk).update(updated_at=long_ago)
    WorkflowStep.objects.filter(run=runs["timer"]).update(updated_at=long_ago)

    def stuck(kind: str) -> set[Any]:
        return listed_ids(admin_client.get(CHANGELIST, {"stuck": kind}))

    # A step whose own worker went silent is the "waiting on" filter's (it reads the steps).
    assert stuck("lease") == {abandoned.pk}
    assert stuck("stalled") == {stalled.pk}
    assert stuck("any") == {abandoned.pk, stalled.pk}


@pytest.mark.parametrize(
    "params",
    [{"retrying": "yes"}, {"retrying": "no"}, {"stuck": "any"}, {"stuck": "lease"}],
    ids=lambda params: "=".join(*params.items()),
)
def test_filter__retrying_and_stuck_read_run_rows_only(admin_client, runs, params):
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(CHANGELIST, params).status_code == 200

    # The page's unfinished steps are read by their own query (the "waiting on" column); no
    # query that selects runs reads a step.
    runs_read = [q["sql"] for q in queries if 'FROM "pikku_workflows_workflowrun"' in q["sql"]]
    assert runs_read
    assert not [sql for sql in runs_read if "pikku_workflows_workflowstep" in sql]


def test_filter__started_date(admin_client, runs):
    old = runs["completed"]
    WorkflowRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)

    # The "Past 7 days" link of the filter.
    response = admin_client.get(
        CHANGELIST,
        {
            "created_at__gte": str(today - timedelta(days=7)),
            "created_at__lt": str(today + timedelta(days=1)),
        },
    )

    listed = listed_ids(response)
    assert old.pk not in listed
    assert runs["failed"].pk in listed
    assert "By started" in response.content.decode()


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("desk", {"completed"}),
        ("DESK", {"completed"}),
        ("invoice", {"invoice", "child"}),  # the workflow, and an input asking for one
        ("zebra", set()),
    ],
)
def test_search__input_text_and_workflow(admin_client, runs, term, expected):
    response = admin_client.get(CHANGELIST, {"q": term})

    assert listed_ids(response) == {runs[name].pk for name in expected}


def test_summary__counts_runs_per_workflow_and_status(admin_client, runs):
    response = admin_client.get(CHANGELIST, {"level": "all"})

    summary = response.context["cl"].status_summary
    by_workflow = {
        row["workflow"]: [cell["count"] for cell in row["cells"]] for row in summary["rows"]
    }
    # Columns: queued, running, suspended, completed, failed, cancelled, continued.
    assert by_workflow == {
        "admin_tests.invoice": [0, 1, 0, 0, 0, 0, 0],
        "admin_tests.order": [0, 5, 1, 1, 1, 0, 0],
    }
    assert summary["total"] == len(runs)
    content = response.content.decode()
    assert "Runs by workflow and status" in content
    assert "?level=all&amp;status__exact=failed&amp;workflow=admin_tests.order" in content


def test_summary__follows_the_filters(admin_client, runs):
    response = admin_client.get(CHANGELIST, {"waiting_on": "timer", "level": "all"})

    summary = response.context["cl"].status_summary
    assert [(row["workflow"], row["total"]) for row in summary["rows"]] == [
        ("admin_tests.invoice", 1),
        ("admin_tests.order", 1),
    ]


def test_list__query_count_does_not_grow_with_runs(admin_client, django_assert_max_num_queries):
    def build(count: int) -> None:
        now = timezone.now()
        for index in range(count):
            run = WorkflowRunFactory(workflow=f"flow-{index % 3}", planned_steps=["a", "b"])
            WorkflowStepFactory(run=run, step_key="a", status=StepStatus.SUCCEEDED)
            kind = index % 5
            if kind == 0:
                WorkflowStepFactory(
                    run=run,
                    step_key="b",
                    kind="sleep",
                    status=StepStatus.SCHEDULED,
                    wake_at=now + timedelta(hours=1),
                )
            elif kind == 1:
                WorkflowStepFactory(
                    run=run, step_key="b", status=StepStatus.FAILED, wake_at=now, attempt_limit=3
                )
            elif kind == 2:
                child = WorkflowRunFactory(workflow="child", parent_run=run)
                WorkflowStepFactory(
                    run=run, step_key="b", status=StepStatus.WAITING, child_run=child
                )
            elif kind == 3:
                WorkflowStepFactory(
                    run=run, step_key="b", status=StepStatus.RUNNING, lease_expires_at=now
                )
            else:
                WorkflowRun.objects.filter(pk=run.pk).update(
                    status=RunStatus.SUSPENDED, error={"message": "manual review"}
                )

    def count_queries(**params: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(CHANGELIST, params).status_code == 200
        return len(queries)

    build(5)
    few = count_queries()
    few_filtered = count_queries(waiting_on="timer", stuck="any")
    build(40)
    # session, user, filtered count, total count, the workflow filter's choices, the version
    # filter's counts, the page, the page's unfinished steps, the summary, and the banner's two
    # (no worker is seen)
    with django_assert_max_num_queries(11):
        response = admin_client.get(CHANGELIST, {"level": "all"})
    assert len(response.context["cl"].result_list) == 54
    assert count_queries() == few
    assert count_queries(waiting_on="timer", stuck="any") == few_filtered


@pytest.mark.postgres  # pins PostgreSQL's JSON operator in the SQL
def test_list__leaves_json_payloads_in_the_database(admin_client, runs):
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(CHANGELIST).status_code == 200

    page_sql = next(query["sql"] for query in queries if '"steps_done"' in query["sql"])
    select_list = page_sql.split(' FROM "pikku_workflows_workflowrun"')[0]
    for column in ("input", "output", "state"):
        assert f'"pikku_workflows_workflowrun"."{column}"' not in select_list
    # Of the error only its message is read (a suspended run's reason), never its traceback.
    assert '"pikku_workflows_workflowrun"."error",' not in select_list
    assert "->" in select_list


def test_list__selection_checkbox_is_djangos_markup(runs):
    from django.contrib import admin
    from django.contrib.admin import ModelAdmin

    run_admin = admin.site._registry[WorkflowRun]
    run = runs["completed"]

    assert run_admin.action_checkbox(run) == ModelAdmin.action_checkbox(run_admin, run)
