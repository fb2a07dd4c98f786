"""A database cut and a queue outage under a real worker with runs in flight: the worker logs
each outage as one WARNING when it begins and one line when it ends, with no traceback (a 10 s
cut used to write hundreds per worker), and every run completes once the database or the queue
is back (docs/operations.md, "Outages")."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from psycopg import sql

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.e2e.conftest import worker_database_url
from tests.faults import QUEUE_TABLE, refused

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

BEGAN = "pikku_workflows: outage: "
OVER = "pikku_workflows: outage over: "


@contextlib.contextmanager
def database_cut() -> Iterator[None]:
    """While inside, the test database takes no connection and every open one is terminated:
    what a failover or a network cut does to the worker (our own is cut too)."""
    name = connection.settings_dict["NAME"]
    server = worker_database_url().rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        try:
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )
    connection.close()


def start_runs(count: int) -> list[str]:
    """Runs of 40 queued steps of 0.05 s: each pass runs them in place until its one-second
    budget is spent, then sends the next step through the queue."""
    return [
        pw.start_workflow("e2e.count", {"start": n, "steps": 40, "seconds": 0.05})
        for n in range(count)
    ]


def completed(run_ids: list[str]) -> bool:
    statuses = list(WorkflowRun.objects.filter(pk__in=run_ids).values_list("status", flat=True))
    return statuses == [RunStatus.COMPLETED] * len(run_ids)


def test_worker__an_outage_is_one_line_when_it_begins_and_one_when_it_ends(start_worker):
    worker = start_worker()
    before_cut = len(worker.log())
    cut_runs = start_runs(4)
    under_way = WorkflowStep.objects.filter(run_id__in=cut_runs)
    wait_until(under_way.exists, 60, "the runs to be under way")

    with database_cut():
        time.sleep(4)
    cut = wait_until(lambda: OVER in worker.log()[before_cut:] and worker.log()[before_cut:], 30)

    assert cut.count(BEGAN) == 1, cut
    assert cut.count(OVER) == 1
    assert "Traceback" not in cut
    wait_until(lambda: completed(cut_runs), 60, "the runs in flight to complete")

    before_outage = len(worker.log())
    queue_runs = start_runs(4)
    with refused(QUEUE_TABLE, message="queue outage"):
        time.sleep(3)
    outage = wait_until(
        lambda: OVER in worker.log()[before_outage:] and worker.log()[before_outage:], 30
    )

    assert outage.count(BEGAN) == 1, outage
    assert "queue outage" in outage.split(BEGAN)[1].splitlines()[0]
    assert outage.count(OVER) == 1
    assert "Traceback" not in outage
    wait_until(lambda: completed(queue_runs), 90, "the runs in flight to complete")
