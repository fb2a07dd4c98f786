"""Every run filter of the list, and the counts endpoint with the same filters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.api.bulk import RULES
from pikku_workflows.api.filters import BULK_FILTERS, RunFilterSet
from pikku_workflows.api.serializers import BulkSerializer, bulk_option_names
from pikku_workflows.engine.store.run_list_fields import refresh_list_fields
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import StepStatus
from tests.api.conftest import API
from tests.factories import WorkflowRunFactory, WorkflowStepFactory
from tests.shop import Shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(make_user: Any) -> dict[str, WorkflowRun]:
    """A run in each state the engine reaches (through the engine), plus runs with a live and a
    lapsed step lease, a child run and one with a subject."""
    shop = Shop()
    shop.register()
    bob = make_user("bob")
    built = {
        "completed": shop.start(items=["lamp"]),
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
        built[name] = WorkflowRunFactory(workflow="admin_tests.order", started_by=bob)
        WorkflowStepFactory(
            run=built[name], step_key="charge", status=StepStatus.RUNNING, lease_expires_at=lease
        )
        refresh_list_fields(built[name].pk)  # as the pass that parked it on the step does
    WorkflowRun.objects.filter(pk=built["completed"].pk).update(
        subject_type=ContentType.objects.get_for_model(WorkflowRun), subject_id="42"
    )
    return built


def ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {item["id"] for item in response.json()["results"]}


def names(runs: dict[str, WorkflowRun], *chosen: str) -> set[str]:
    return {str(runs[name].pk) for name in chosen}


def test_filter__no_filter_lists_every_top_level_run_like_the_admin(operator_api, runs):
    top_level = names(runs, *runs) - names(runs, "invoice")
    assert ids(operator_api.get(API + "runs/")) == top_level
    assert ids(operator_api.get(API + "runs/?level=top")) == top_level
    assert ids(operator_api.get(API + "runs/?level=children")) == names(runs, "invoice")
    assert ids(operator_api.get(API + "runs/?level=all")) == names(runs, *runs)
    assert operator_api.get(API + "runs/counts/").json()["total"] == len(top_level)
    # A filter that names runs finds them at any level (a child's id must be findable).
    invoice = str(runs["invoice"].pk)
    assert ids(operator_api.get(API + f"runs/?id={invoice}")) == {invoice}
    assert ids(operator_api.get(API + f"runs/?q={invoice[:8]}")) == {invoice}


@pytest.mark.parametrize(
    "query",
    [
        "status=failed&status=suspended",
        "status=failed,suspended",
        "status=failed, suspended,",
        "status=failed,suspended&status=failed",
    ],
)
def test_filter__status_repeated_or_comma_separated_is_an_or(operator_api, runs, query):
    assert ids(operator_api.get(f"{API}runs/?{query}")) == names(runs, "failed", "suspended")


def test_filter__workflow_repeated_or_comma_separated(operator_api, runs):
    both = ids(operator_api.get(API + "runs/?workflow=admin_tests.invoice,nope&level=all"))
    repeated = ids(
        operator_api.get(API + "runs/?workflow=admin_tests.invoice&workflow=x&level=all")
    )

    assert both == repeated == names(runs, "invoice")


def test_filter__id_list(operator_api, runs):
    chosen = f"{runs['failed'].pk},{runs['timer'].pk}"

    assert ids(operator_api.get(API + f"runs/?id={chosen}")) == names(runs, "failed", "timer")


def test_filter__started_window_is_half_open(operator_api, runs):
    now = timezone.now()
    WorkflowRun.objects.filter(pk=runs["failed"].pk).update(created_at=now - timedelta(days=2))
    WorkflowRun.objects.filter(pk=runs["timer"].pk).update(created_at=now - timedelta(days=1))
    day_ago = (now - timedelta(days=1)).isoformat()

    before = ids(operator_api.get(API + "runs/", {"started_before": day_ago, "level": "all"}))
    after = ids(operator_api.get(API + "runs/", {"started_after": day_ago, "level": "all"}))

    assert before == names(runs, "failed")
    assert names(runs, "timer") <= after
    assert not before & after
    assert before | after == names(runs, *runs)


def test_filter__finished_window(operator_api, runs):
    now = timezone.now()
    WorkflowRun.objects.filter(pk=runs["failed"].pk).update(finished_at=now - timedelta(days=2))
    day_ago = (now - timedelta(days=1)).isoformat()

    assert ids(operator_api.get(API + "runs/", {"finished_before": day_ago})) == names(
        runs, "failed"
    )
    assert ids(operator_api.get(API + "runs/", {"finished_after": day_ago})) == names(
        runs, "completed"
    )


def test_filter__naive_datetimes_are_in_the_current_time_zone(operator_api, runs):
    future = (timezone.now() + timedelta(hours=1)).replace(tzinfo=None).isoformat()

    assert ids(
        operator_api.get(API + "runs/", {"started_before": future, "level": "all"})
    ) == names(runs, *runs)


def test_filter__started_by_username(operator_api, runs):
    assert ids(operator_api.get(API + "runs/?started_by=bob")) == names(runs, "step", "lease")
    assert ids(operator_api.get(API + "runs/?started_by=nobody")) == set()


def test_filter__parent_run_and_has_parent(operator_api, runs):
    child_of = ids(operator_api.get(API + f"runs/?parent_run={runs['child'].pk}"))

    assert child_of == names(runs, "invoice")
    for true in ("true", "1", "TRUE"):
        assert ids(operator_api.get(API + f"runs/?has_parent={true}")) == names(runs, "invoice")
    for false in ("false", "0"):
        assert "invoice" not in ids(operator_api.get(API + f"runs/?has_parent={false}"))
        assert len(ids(operator_api.get(API + f"runs/?has_parent={false}"))) == len(runs) - 1


def test_filter__subject(operator_api, runs):
    response = operator_api.get(
        API + "runs/?subject_type=pikku_workflows.workflowrun&subject_id=42"
    )

    assert ids(response) == names(runs, "completed")
    assert ids(operator_api.get(API + "runs/?subject_id=43")) == set()


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
def test_filter__waiting_on_matches_the_admin_filter(operator_api, runs, kind, expected):
    query = f"runs/?waiting_on={kind}&level=all"
    assert ids(operator_api.get(API + query)) == names(runs, *expected)


def test_filter__waiting_on_matches_the_summaries(operator_api, runs):
    for kind in ("step", "timer", "retry", "child", "lease", "suspend"):
        for item in operator_api.get(API + f"runs/?waiting_on={kind}").json()["results"]:
            # A list item is the run's row, which does not judge the clock: a lapsed lease is
            # a step there, and `lease` in the run's own summary.
            assert item["waiting_on"]["kind"] == ("step" if kind == "lease" else kind)
            assert pw.get_run_status(item["id"])["waiting_on"]["kind"] == kind


def test_filter__awaiting_approval_matches_no_run_until_approvals_exist(operator_api, runs):
    assert ids(operator_api.get(API + "runs/?awaiting_approval=true")) == set()
    assert ids(operator_api.get(API + "runs/?awaiting_approval=0&level=all")) == names(runs, *runs)


def test_filter__q_is_an_id_prefix_or_a_workflow_name(operator_api, runs):
    prefix = str(runs["timer"].pk)[:8]

    assert str(runs["timer"].pk) in ids(operator_api.get(API + f"runs/?q={prefix}"))
    assert ids(operator_api.get(API + "runs/?q=INVOICE")) == names(runs, "invoice")  # a child


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=finished", "status"),
        ("id=123", "id"),
        ("parent_run=nope", "parent_run"),
        ("has_parent=maybe", "has_parent"),
        ("awaiting_approval=yes", "awaiting_approval"),
        ("started_after=yesterday", "started_after"),
        ("started_before=9999-12-31T23:59:59-12:00", "started_before"),
        ("waiting_on=approvals", "waiting_on"),  # not a kind (approval is)
        ("subject_type=no.such", "subject_type"),
        ("subject_type=nodot", "subject_type"),
        ("q=" + "x" * 300, "q"),
        ("started_by=a%00b", "started_by"),
        ("workflow=" + "w" * 300, "workflow"),
    ],
)
def test_filter__malformed_value_is_invalid_input_naming_the_filter(
    operator_api, runs, query, field
):
    response = operator_api.get(f"{API}runs/?{query}")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert field in response.json()["fields"]


def test_counts__total_and_groups_with_the_same_filters(operator_api, runs):
    by_status = operator_api.get(API + "runs/counts/?group_by=status&level=all")
    both = operator_api.get(API + "runs/counts/?group_by=status,workflow&status=running&level=all")
    total = operator_api.get(API + "runs/counts/?workflow=admin_tests.invoice&level=all")

    assert by_status.json()["total"] == len(runs)
    assert {g["status"]: g["count"] for g in by_status.json()["groups"]} == {
        "completed": 1,
        "failed": 1,
        "suspended": 1,
        "running": 6,
    }
    assert both.json() == {
        "total": 6,
        "groups": [
            {"status": "running", "workflow": "admin_tests.invoice", "count": 1},
            {"status": "running", "workflow": "admin_tests.order", "count": 5},
        ],
    }
    assert total.json() == {"total": 1, "groups": []}


# Filters the stored run counts answer, each with and without groups.
STORED_COUNT_QUERIES = [
    "",
    "status=running,failed",
    "workflow=admin_tests.invoice",  # a child: none at the top level
    "workflow=admin_tests.invoice&level=all",
    "level=children",
    "level=all",
    "has_parent=true",
    "has_parent=false&level=all",
    "latest_only=true&status=completed,running",
    "status=running&workflow=admin_tests.order,admin_tests.invoice&level=all",
    "workflow=no.such.workflow",
]
NOTHING_COUNTED = {"workflow=admin_tests.invoice", "workflow=no.such.workflow"}


@pytest.mark.parametrize(
    "group_by", ["", "status", "workflow", "status,workflow", "workflow,status"]
)
def test_counts__stored_counts_answer_byte_for_byte_as_counting_the_runs(
    operator_api, runs, group_by
):
    # A time window since long ago selects the same runs but makes counts/ count them.
    counting = "started_after=2000-01-01T00:00:00Z"
    for query in STORED_COUNT_QUERIES:
        url = f"{API}runs/counts/?group_by={group_by}&{query}"
        stored, counted = operator_api.get(url), operator_api.get(f"{url}&{counting}")
        assert stored.status_code == counted.status_code == 200, stored.content
        assert stored.content == counted.content, query
        assert stored.json()["total"] > 0 or query in NOTHING_COUNTED


def test_counts__unknown_group_is_invalid_input(operator_api):
    response = operator_api.get(API + "runs/counts/?group_by=started_by")

    assert response.status_code == 400
    assert "group_by" in response.json()["fields"]


def test_bulk_body__documents_every_list_filter():
    options = {name for rule in RULES.values() for name in bulk_option_names(rule)}
    assert set(BulkSerializer().fields) == {*BULK_FILTERS, *options}
    assert set(BULK_FILTERS) == set(RunFilterSet.base_filters) - {"ordering"}
