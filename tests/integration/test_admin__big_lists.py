"""The run changelist never counts the whole table: exact up to a limit, estimated past it (the
planner's estimate on PostgreSQL), with no facet counts and no per-workflow summary then."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pikku_workflows.admin import big_lists
from pikku_workflows.sql import without_comments
from tests.admin_support import CHANGELIST
from tests.factories import WorkflowRunFactory

pytestmark = pytest.mark.django_db


def counts_of_runs(queries: list[dict]) -> list[str]:
    return [
        without_comments(query["sql"])
        for query in queries
        if "COUNT(" in query["sql"].upper() and "pikku_workflows_workflowrun" in query["sql"]
    ]


def test_changelist__counts_at_most_the_limit_plus_one_row(admin_client, monkeypatch):
    monkeypatch.setattr(big_lists, "EXACT_COUNT_LIMIT", 3)
    WorkflowRunFactory.create_batch(5, workflow="many")

    with CaptureQueriesContext(connection) as captured:
        content = admin_client.get(CHANGELIST, {"_facets": "1"}).content.decode()

    counts = counts_of_runs(captured.captured_queries)
    # The list's count is a COUNT over a subquery of at most 4 rows; no facet counts, no
    # runs-by-workflow-and-status summary; the version filter counts runs in flight only.
    [bounded] = [sql for sql in counts if "code_version" not in sql]
    assert re.search(r"LIMIT 4\b", bounded)
    for versions in (sql for sql in counts if "code_version" in sql):
        assert re.search(r'"status" IN \((\S+queued\S*, )?\S+running\S*, \S+suspended', versions)
    assert 'id="run-count-estimate"' in content
    assert 'id="run-summary"' not in content


def test_changelist__under_the_limit_counts_exactly_and_sums_by_status(admin_client):
    WorkflowRunFactory.create_batch(2, workflow="few")

    content = admin_client.get(CHANGELIST).content.decode()

    assert 'id="run-count-estimate"' not in content
    assert 'id="run-summary"' in content


@pytest.mark.postgres
def test_estimated_rows__asks_the_planner_not_the_table(monkeypatch):
    WorkflowRunFactory.create_batch(5, workflow="many")
    from pikku_workflows.models import WorkflowRun

    with CaptureQueriesContext(connection) as captured:
        estimate = big_lists.estimated_rows(WorkflowRun.objects.filter(workflow="many"))

    assert estimate is not None and estimate >= 1
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["EXPLAIN"]
