"""The stored run counts (models/run_counts.py) against the runs themselves: after starts,
finishes, retries, cancels and purges from racing connections, with folds racing them, they equal
a `COUNT(*) ... GROUP BY`; and two starts of one workflow never wait on each other for them (a
start's change is a row of its own, not an update of a shared counter)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.engine.store.run_counts import fold_run_count_changes
from pikku_workflows.models import WorkflowRun, WorkflowRunCount, WorkflowRunCountChange
from pikku_workflows.models.run_counts import current_run_counts
from tests.concurrency.harness import JOIN_TIMEOUT, race
from tests.retention import age, ended_order
from tests.run_counts import counted_from_the_runs, register_counting_shop

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RACES = 6


@pytest.fixture(autouse=True)
def shop() -> None:
    register_counting_shop()


def _failed_run() -> str:
    return str(pw.start_workflow("retention.broken", {}, inline=True))


def _napping_run() -> str:
    return str(pw.start_workflow("counts.napping", {}, inline=True))


def _folded(_: Any) -> None:
    fold_run_count_changes()


def test_run_counts__equal_the_runs_after_racing_starts_moves_purges_and_folds():
    # Starts of every kind (a parent with its child, a failure, a run left napping), with
    # folds among them.
    starts = [lambda _, n=n: ended_order(n) for n in range(RACES)]
    starts += [lambda _: _failed_run() for _ in range(RACES)]
    starts += [lambda _: _napping_run() for _ in range(RACES)]
    outcomes = race([*starts, _folded, _folded])
    assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    orders = outcomes[:RACES]
    failed = outcomes[RACES : 2 * RACES]
    napping = outcomes[2 * RACES : 3 * RACES]

    # Moves racing one another and a fold: retries (failed -> running -> failed again),
    # cancels (running -> cancelled), and a purge of old orders with their children.
    for run_id in orders[:3]:
        age(run_id, days=40)
    moves = [lambda _, r=r: pw.retry_run(r) for r in failed[:3]]
    moves += [lambda _, r=r: pw.cancel_run(r) for r in napping[:3]]
    moves += [lambda _: pw.purge_runs(older_than="30d"), _folded]
    outcomes = race(moves)
    assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert not WorkflowRun.objects.filter(pk__in=orders[:3]).exists()  # the purge did purge

    truth = counted_from_the_runs()
    assert {status for (_, status, _) in truth} >= {"completed", "failed", "cancelled", "running"}
    assert {top_level for (_, _, top_level) in truth} == {True, False}
    assert current_run_counts() == truth
    fold_run_count_changes()
    assert not WorkflowRunCountChange.objects.exists()
    folded = {
        (row.workflow, row.status, row.top_level): row.runs
        for row in WorkflowRunCount.objects.exclude(runs=0)
    }
    assert folded == truth == current_run_counts()


def test_run_counts__two_starts_of_one_workflow_never_wait_on_each_other():
    """One start's transaction stays open on another connection; a second start of the same
    workflow, and a fold, commit meanwhile (a lock wait would fail them at the lock timeout)."""
    _napping_run()  # the workflow's version row, which its first start writes, exists
    started, release = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def start_and_hold() -> None:
        try:
            with transaction.atomic():
                outcome.append(_napping_run())
                started.set()
                release.wait(JOIN_TIMEOUT)
        except BaseException as exc:
            outcome.append(exc)
            started.set()
        finally:
            connection.close()

    holder = threading.Thread(target=start_and_hold, daemon=True)
    holder.start()
    try:
        assert started.wait(JOIN_TIMEOUT)
        assert not isinstance(outcome[0], BaseException), outcome[0]
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        second = _napping_run()
        fold_run_count_changes()
        # The open start is not counted yet (its change is not committed); the second is.
        assert current_run_counts() == {("counts.napping", "running", True): 2}
        assert WorkflowRun.objects.get(pk=second).status == "running"
    finally:
        release.set()
        holder.join(JOIN_TIMEOUT)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert (
        current_run_counts() == counted_from_the_runs() == {("counts.napping", "running", True): 3}
    )
