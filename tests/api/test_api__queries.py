"""List, detail, counts and timeline cost a constant number of queries, whatever the page size
or the number of steps (pinned, so a query per row fails here)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus, StepStatus
from tests.api.conftest import API
from tests.factories import WorkflowRunFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db

# Every request below starts with two queries for the user's permissions (user and group
# permissions, read once per request to decide what it may see).
PERMISSIONS = 2


def run_with_steps(count: int, **fields: Any) -> WorkflowRun:
    run = WorkflowRunFactory(status=RunStatus.COMPLETED, output={"ok": True}, **fields)
    for index in range(count):
        WorkflowStepFactory(run=run, step_key=f"s{index}", status=StepStatus.SUCCEEDED)
    return run


def queries(api: Any, user: Any, url: str) -> int:
    # A fresh user object per request: its permission cache starts empty, as in production.
    api.force_authenticate(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as captured:
        response = api.get(url)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
    assert response.status_code == 200, response.content
    return len(captured)


def test_list__one_query_for_any_page_size_and_step_count(operator_api, operator):
    for steps in (1, 5, 2):
        run_with_steps(steps)
    small = queries(operator_api, operator, API + "runs/?page_size=1")
    for steps in (12, 0, 30, 7):
        run_with_steps(steps, input={"big": "x" * 100})
    large = queries(operator_api, operator, API + "runs/?page_size=50&include=input,output")

    # The page of runs (with their starters): their rows alone, never their steps.
    assert small == large == PERMISSIONS + 1


@pytest.mark.parametrize(
    "query",
    [
        "status=failed",
        "status=running,suspended",
        "workflow=w1",
        "waiting_on=approval",
        "waiting_on=lease",
        "awaiting_approval=true",
        "started_by=operator",
        "started_after=2020-01-01T00:00:00Z",
        "finished_before=2100-01-01T00:00:00Z",
        "level=children",
        "has_parent=true",
        "q=w1",
        "status=failed&workflow=w1&ordering=created_at",
    ],
)
def test_list__one_query_under_any_filter(operator_api, operator, query):
    for index in range(3):
        run_with_steps(2, workflow=f"w{index}", started_by=operator)

    # The page of runs (with their starters), filtered in its own WHERE: no query per filter.
    assert queries(operator_api, operator, f"{API}runs/?page_size=50&{query}") == PERMISSIONS + 1


def test_detail__constant_whatever_the_step_count(operator_api, operator):
    few = run_with_steps(1)
    many = run_with_steps(40)

    # Visibility, then the summary: the run, its steps, their history.
    assert queries(operator_api, operator, f"{API}runs/{few.pk}/") == PERMISSIONS + 4
    assert queries(operator_api, operator, f"{API}runs/{many.pk}/") == PERMISSIONS + 4


def test_timeline__constant_whatever_the_step_count(operator_api, operator):
    few = run_with_steps(1)
    many = run_with_steps(40)

    # Visibility, then the run's existence, its events (inside this test's transaction numbered
    # first on PostgreSQL: SET CONSTRAINTS; SQLite numbers them as they are written), their
    # attempts' rows.
    expected = PERMISSIONS + (5 if connection.vendor == "postgresql" else 4)
    assert queries(operator_api, operator, f"{API}runs/{few.pk}/timeline/") == expected
    assert queries(operator_api, operator, f"{API}runs/{many.pk}/timeline/") == expected


def test_counts__one_query_whatever_the_number_of_runs_and_groups(operator_api, operator):
    run_with_steps(0)
    one = queries(operator_api, operator, API + "runs/counts/?group_by=status,workflow")
    for index in range(10):
        run_with_steps(0, workflow=f"w{index}")
    many = queries(operator_api, operator, API + "runs/counts/?group_by=status,workflow")

    assert one == many == PERMISSIONS + 1


def test_events__a_terminal_runs_stream_reads_a_constant_number_of_queries(operator_api, operator):
    few = run_with_steps(1)
    many = run_with_steps(40)

    assert queries(operator_api, operator, f"{API}runs/{few.pk}/events/") == queries(
        operator_api, operator, f"{API}runs/{many.pk}/events/"
    )
