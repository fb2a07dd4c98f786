"""`manage.py pikku_purge` killed with SIGKILL in the middle of a batch: its open batch rolls
back whole, so every run is either still there with all its rows or gone with all of them and
its tombstone; no row is left naming a purged run, and the next purge finishes the work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowRunTombstone, WorkflowStepHistory
from tests.conftest import wait_until
from tests.e2e.conftest import REPO_ROOT, worker_database_url
from tests.retention import age, ended_order, register_shop, rows_naming

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

HISTORY = WorkflowStepHistory._meta.db_table
ORDERS = 12


def _slow_history_deletes() -> None:
    """Each deleted history row costs 50 ms (a trigger): a batch takes seconds, long enough to
    be killed in the middle of."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION pikku_slow_delete() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN OLD; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER pikku_slow_delete BEFORE DELETE ON {HISTORY} "
            "FOR EACH ROW EXECUTE FUNCTION pikku_slow_delete()"
        )


def _drop_slow_history_deletes() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS pikku_slow_delete ON {HISTORY}")
        cursor.execute("DROP FUNCTION IF EXISTS pikku_slow_delete()")


def _purge_backends(statement: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
            "AND state <> 'idle' AND query LIKE %s",
            [f"{statement}%"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def test_pikku_purge__killed_mid_batch_leaves_every_run_whole_or_wholly_gone():
    register_shop()
    roots = [ended_order(n) for n in range(ORDERS)]
    for run_id in roots:
        age(run_id, days=40)
    every_run = [str(pk) for pk in WorkflowRun.objects.values_list("pk", flat=True)]
    _slow_history_deletes()
    purge = subprocess.Popen(
        [sys.executable, "manage.py", "pikku_purge", "--older-than", "30d", "--batch", "4"],
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": worker_database_url()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: WorkflowRunTombstone.objects.exists() and _purge_backends("DELETE"),
            30,
            "the purge to be deleting the rows of its second batch",
        )
    finally:
        purge.send_signal(signal.SIGKILL)
        purge.wait(10)
        wait_until(lambda: not _purge_backends(""), 30, "the killed purge's backend to end")
        _drop_slow_history_deletes()

    tombstones = {str(pk) for pk in WorkflowRunTombstone.objects.values_list("pk", flat=True)}
    left = {str(pk) for pk in WorkflowRun.objects.values_list("pk", flat=True)}
    assert tombstones and left  # killed after one batch committed, before the last
    assert tombstones == set(every_run) - left
    assert rows_naming(sorted(tombstones)) == {}
    kept_roots = [run_id for run_id in roots if run_id in left]
    # Each run left has every row it had: the killed batch rolled back whole.
    assert WorkflowStepHistory.objects.filter(step__run_id__in=kept_roots).count() == 3 * len(
        kept_roots
    )

    counts = pw.purge_runs(older_than="30d")

    assert counts["runs"] == len(left)
    assert not WorkflowRun.objects.exists()
    assert rows_naming(every_run) == {}
