"""A purge beside everything else that touches a run: it never waits on another transaction's
row lock (a claim, an operator) but skips that run's tree; a retry or a fork racing it on the
same run ends one way (purged, and the operation told so; or not purged, and the operation
done); and a second purge finds the purger's lock held and stops."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.engine.store.claims import PURGER_LOCK_KEY
from pikku_workflows.models import WorkflowRun, WorkflowRunTombstone, WorkflowStep
from tests.concurrency.harness import race
from tests.faults import HeldRowLock
from tests.retention import age, ended_order, register_shop, rows_naming

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RUNS = WorkflowRun._meta.db_table
STEPS = WorkflowStep._meta.db_table
# What a step claim takes: the step row, and its run's row shared.
CLAIMED_RUN = f"SELECT id FROM {RUNS} WHERE id = %s FOR SHARE"
CLAIMED_STEP = f"SELECT id FROM {STEPS} WHERE run_id = %s AND step_key = 'pack' FOR NO KEY UPDATE"
RACES = 8


@pytest.fixture(autouse=True)
def shop() -> None:
    register_shop()


@pytest.fixture
def no_waiting():
    """A lock wait in this connection fails at once instead of hanging the test."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '1s'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET lock_timeout")


def _old_order(n: int) -> str:
    run_id = ended_order(n)
    age(run_id, days=40)
    return run_id


def _old_failed_run() -> str:
    run_id = pw.start_workflow("retention.broken", {}, inline=True)
    age(run_id, days=40)
    return run_id


@pytest.mark.parametrize("held", [CLAIMED_RUN, CLAIMED_STEP], ids=["run row", "step row"])
def test_purge__skips_a_run_whose_row_another_transaction_holds(no_waiting, held):
    claimed, free = _old_order(1), _old_order(2)

    with HeldRowLock(held, [claimed]):
        counts = pw.purge_runs(older_than="30d")

    assert counts["runs"] == 2  # the free order and its child
    assert counts["skipped"] == (1 if held == CLAIMED_STEP else 0)
    assert WorkflowRun.objects.filter(pk=claimed).exists()
    assert not WorkflowRun.objects.filter(pk=free).exists()
    assert pw.purge_runs(older_than="30d")["runs"] == 2


def test_purge__a_second_purger_finds_the_lock_held_and_deletes_nothing(no_waiting):
    run_id = _old_order(1)

    with HeldRowLock("SELECT pg_advisory_xact_lock(%s)", [PURGER_LOCK_KEY]):
        counts = pw.purge_runs(older_than="30d")

    assert counts["busy"] and counts["runs"] == 0
    assert WorkflowRun.objects.filter(pk=run_id).exists()


def _ends_one_way(run_id: str, operation_outcome: object) -> str:
    """'purged' or 'kept', after checking the run is wholly one or the other."""
    purged = WorkflowRunTombstone.objects.filter(pk=run_id).exists()
    if purged:
        assert not WorkflowRun.objects.filter(pk=run_id).exists()
        assert rows_naming([run_id]) == {}
        assert isinstance(operation_outcome, pw.RunPurged), operation_outcome
        return "purged"
    assert WorkflowRun.objects.filter(pk=run_id).exists()
    assert not isinstance(operation_outcome, BaseException), operation_outcome
    return "kept"


def test_purge__racing_a_retry_of_the_same_run_ends_one_way():
    for _ in range(RACES):
        run_id = _old_failed_run()

        purge, retry = race(
            [
                lambda _: pw.purge_runs(older_than="30d"),
                lambda _, run_id=run_id: pw.retry_run(run_id),
            ]
        )

        assert not isinstance(purge, BaseException), purge
        if _ends_one_way(run_id, retry) == "kept":
            assert WorkflowRun.objects.get(pk=run_id).status == "running"
            WorkflowRun.objects.filter(pk=run_id).delete()


def test_purge__racing_a_fork_of_the_same_run_ends_one_way():
    for n in range(RACES):
        run_id = _old_order(n)

        purge, fork = race(
            [
                lambda _: pw.purge_runs(older_than="30d"),
                lambda _, run_id=run_id: pw.fork_run(run_id, from_step="label"),
            ]
        )

        assert not isinstance(purge, BaseException), purge
        forks = WorkflowRun.objects.filter(parent_run=None).exclude(pk=run_id)
        if isinstance(fork, BaseException):
            assert isinstance(fork, pw.RunPurged), fork
            assert not forks.exists()
        else:
            copied = WorkflowStep.objects.filter(run_id=fork, copied=True)
            assert list(copied.values_list("step_key", flat=True)) == ["pack"]
            source_left = WorkflowRun.objects.filter(pk=run_id).exists()
            assert forks.get().forked_from_id == (uuid.UUID(run_id) if source_left else None)
        forks.delete()
        pw.purge_runs(older_than="30d")
