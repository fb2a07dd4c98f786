"""`manage.py pikku_purge` killed with SIGKILL in the middle of a batch: its open batch rolls
back whole, so every run is either still there with all its rows or gone with all of them and
its tombstone; no row is left naming a purged run, and the next purge finishes the work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowRunTombstone, WorkflowStepHistory
from tests.conftest import wait_until
from tests.e2e.conftest import REPO_ROOT, worker_database_url
from tests.faults import busy_backends, slowed
from tests.retention import age, ended_order, register_shop, rows_naming

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

HISTORY = WorkflowStepHistory._meta.db_table
ORDERS = 12


def test_pikku_purge__killed_mid_batch_leaves_every_run_whole_or_wholly_gone():
    register_shop()
    roots = [ended_order(n) for n in range(ORDERS)]
    for run_id in roots:
        age(run_id, days=40)
    every_run = [str(pk) for pk in WorkflowRun.objects.values_list("pk", flat=True)]
    # Each deleted history row costs 50 ms: a batch takes seconds, long enough to be killed in
    # the middle of.
    with slowed(HISTORY, seconds=0.05, on="DELETE"):
        purge = subprocess.Popen(
            [sys.executable, "manage.py", "pikku_purge", "--older-than", "30d", "--batch", "4"],
            cwd=REPO_ROOT,
            env={**os.environ, "DATABASE_URL": worker_database_url()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(
                lambda: WorkflowRunTombstone.objects.exists() and busy_backends("WITH tombstones"),
                30,
                "the purge to be deleting the rows of its second batch",
            )
        finally:
            purge.send_signal(signal.SIGKILL)
            purge.wait(10)
            wait_until(lambda: not busy_backends(), 30, "the killed purge's backend to end")

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
