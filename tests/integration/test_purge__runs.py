"""`pw.purge_runs` and `pw.hold_run`: ended root runs older than the cutoff (by when they ended,
on the database clock) go with every row naming them; a tombstone answers for each (its
idempotency key, `RunPurged`); held runs, runs still going and their trees stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.models import (
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowRunTombstone,
    WorkflowSignal,
    WorkflowStep,
)
from pikku_workflows.querysets import DatabaseNow
from tests.retention import age, ended_order, register_shop, rows_naming

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def shop() -> None:
    register_shop()


def _children(run_id) -> list:
    return list(WorkflowRun.objects.filter(parent_run_id=run_id).values_list("pk", flat=True))


def test_purge__takes_old_ended_runs_with_every_row_naming_them():
    old = ended_order(1)
    child = _children(old)
    WorkflowSignal.objects.create(run_id=old, name="late")
    pw.hold_run(old, hold=True)
    pw.hold_run(old, hold=False)
    recent = ended_order(2)
    age(old, days=40)
    age(recent, days=3)

    counts = pw.purge_runs(older_than="30d")

    assert counts["runs"] == 2 and counts["skipped"] == 0 and not counts["busy"]
    assert not WorkflowRun.objects.filter(pk__in=[old, *child]).exists()
    assert rows_naming([old, *child]) == {}
    assert set(map(str, WorkflowRunTombstone.objects.values_list("pk", flat=True))) == {
        old,
        *map(str, child),
    }
    assert WorkflowStep.objects.filter(run_id=recent).count() == 3
    assert counts["rows"]["workflowstep"] == 4  # pack, label, invoice; the child's number
    assert counts["rows"]["workflowstephistory"] == 4
    assert counts["rows"]["workflowauditentry"] == 2
    assert counts["rows"]["workflowsignal"] == 1


def test_purge__judges_age_by_when_the_run_ended_not_when_it_started():
    started_long_ago = ended_order(1)
    age(started_long_ago, days=400, field="created_at")
    age(started_long_ago, days=1)

    assert pw.purge_runs(older_than="30d")["runs"] == 0
    assert WorkflowRun.objects.filter(pk=started_long_ago).exists()


def test_purge__takes_only_the_statuses_and_workflow_asked_for():
    completed = ended_order(1)
    failed = pw.start_workflow("retention.broken", {}, inline=True)
    for run_id in (completed, failed):
        age(run_id, days=40)

    assert pw.purge_runs(older_than="30d", statuses=["failed"])["runs"] == 1
    assert pw.purge_runs(older_than="30d", workflow="retention.broken")["runs"] == 0
    roots = WorkflowRun.objects.filter(parent_run=None).values_list("pk", flat=True)
    assert [str(pk) for pk in roots] == [completed]


def test_purge__never_takes_a_running_run_nor_a_child_on_its_own():
    running = WorkflowRun.objects.create(workflow="retention.order", status="running")
    old = ended_order(1)
    age(old, days=40)
    (child,) = _children(old)
    WorkflowRun.objects.filter(pk=running.pk).update(finished_at=DatabaseNow() - timedelta(days=99))
    WorkflowRun.objects.filter(pk=child).update(parent_run=running)

    assert pw.purge_runs(older_than="30d")["runs"] == 1
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {running.pk, child}


def test_purge__keeps_a_tree_with_a_run_still_going_below_its_root():
    old = ended_order(1)
    (child,) = _children(old)
    WorkflowRun.objects.filter(pk=child).update(status="running")
    age(old, days=40)

    counts = pw.purge_runs(older_than="30d")

    assert (counts["runs"], counts["skipped"]) == (0, 1)
    assert WorkflowRun.objects.filter(pk__in=[old, child]).count() == 2


def test_purge__never_takes_a_held_run_until_it_is_released():
    operator = get_user_model().objects.create_user("ops")
    kept = ended_order(1)
    age(kept, days=400)

    pw.hold_run(kept, reason="legal hold", by=operator)
    assert pw.purge_runs(older_than="30d")["runs"] == 0
    assert WorkflowRun.objects.get(pk=kept).retention_hold

    pw.hold_run(kept, hold=False, by=operator)
    assert pw.purge_runs(older_than="30d")["runs"] == 2
    assert not WorkflowRun.objects.filter(pk=kept).exists()


def test_hold__is_audited_once_per_change():
    run_id = ended_order(1)
    pw.hold_run(run_id, reason="investigation")
    pw.hold_run(run_id)
    pw.hold_run(run_id, hold=False)

    actions = WorkflowAuditEntry.objects.filter(run_id=run_id).order_by("id")
    assert [(e.action, e.reason) for e in actions] == [
        ("hold", "investigation"),
        ("release", ""),
    ]


def test_purged_run__reads_raise_run_purged_and_unknown_ids_stay_not_found():
    run_id = ended_order(1)
    age(run_id, days=40)
    pw.purge_runs(older_than="30d")

    for read in (
        pw.get_run_status,
        pw.get_run_timeline,
        pw.reconstruct_run_state,
        pw.retry_run,
        pw.hold_run,
        lambda run_id: pw.fork_run(run_id, from_step="label"),
        lambda run_id: pw.send_signal(run_id, "late"),
        lambda run_id: pw.cancel_run(run_id),
    ):
        with pytest.raises(pw.RunPurged) as raised:
            read(run_id)
        assert raised.value.code == "RUN_PURGED"
    with pytest.raises(pw.RunNotFound) as unknown:
        pw.get_run_status("00000000-0000-0000-0000-000000000001")
    assert not isinstance(unknown.value, pw.RunPurged)


def test_purged_run__its_idempotency_key_still_answers_with_its_id():
    run_id = ended_order(1, idempotency_key="order-1")
    age(run_id, days=40)
    pw.purge_runs(older_than="30d")

    again = pw.start_workflow("retention.order", {"n": 1}, idempotency_key="order-1")

    assert again == run_id
    assert not WorkflowRun.objects.filter(workflow="retention.order").exists()


def test_purged_run__a_fork_of_it_stays_and_forgets_its_source():
    source = ended_order(1)
    fork = pw.fork_run(source, from_step="label")
    age(source, days=40)

    pw.purge_runs(older_than="30d")

    assert WorkflowRun.objects.get(pk=fork).forked_from_id is None
    assert WorkflowStep.objects.filter(run_id=fork, copied=True).exists()


def test_purge__a_fork_purged_with_its_source_goes_whole():
    source, fork = ended_order(1), ended_order(2)
    WorkflowRun.objects.filter(pk=fork).update(forked_from_id=source)  # a fork that ended
    age(source, days=40)
    age(fork, days=40)

    counts = pw.purge_runs(older_than="30d")

    assert counts["runs"] == 4 and counts["batches"] == 1  # each order has a child
    assert not WorkflowRun.objects.exists()
    assert rows_naming([source, fork]) == {}


@pytest.mark.postgres
def test_purge__a_batch_deletes_leaves_tombstones_and_clears_in_one_statement_on_postgresql():
    for n in range(3):
        age(ended_order(n), days=40)

    with CaptureQueriesContext(connection) as queries:
        counts = pw.purge_runs(older_than="30d")

    statements = [query["sql"].lstrip() for query in queries.captured_queries]
    assert counts["runs"] == 6 and counts["batches"] == 1
    assert [sql for sql in statements if sql.split()[0] in ("DELETE", "UPDATE", "INSERT")] == []
    assert sum(sql.startswith("WITH tombstones AS (") for sql in statements) == 1


def test_purge__a_dry_run_counts_and_deletes_nothing():
    run_id = ended_order(1)
    age(run_id, days=40)

    counts = pw.purge_runs(older_than="30d", dry_run=True)

    assert counts["runs"] == 2 and counts["rows"]["workflowstephistory"] == 4
    assert WorkflowRun.objects.count() == 2
    assert not WorkflowRunTombstone.objects.exists()


def test_purge__goes_in_batches_of_at_most_batch_root_runs():
    runs = [ended_order(n) for n in range(5)]
    for run_id in runs:
        age(run_id, days=40)

    counts = pw.purge_runs(older_than="30d", batch=2)

    # Batches shrink below `batch` when one holds its locks too long, never grow past it.
    assert counts["runs"] == 10 and counts["batches"] >= 3
    assert not WorkflowRun.objects.exists()


@override_settings(PIKKU_WORKFLOWS={"TOMBSTONE_DAYS": 90})
def test_purge__forgets_tombstones_past_tombstone_days():
    run_id = ended_order(1, idempotency_key="order-1")
    age(run_id, days=40)
    pw.purge_runs(older_than="30d")
    WorkflowRunTombstone.objects.update(purged_at=DatabaseNow() - timedelta(days=91))

    assert pw.purge_runs(older_than="30d")["tombstones_expired"] == 2
    with pytest.raises(pw.RunNotFound) as forgotten:
        pw.get_run_status(run_id)
    assert not isinstance(forgotten.value, pw.RunPurged)
    assert pw.start_workflow("retention.order", {"n": 1}, idempotency_key="order-1") != run_id


@pytest.mark.parametrize(
    "options",
    [
        {"older_than": "abc"},
        {"older_than": -5},
        {"older_than": timedelta(days=-1)},
        {"statuses": ["finished"]},
        {"statuses": ["running"]},
        {"statuses": "completed"},
        {"statuses": []},
        {"workflow": "retention.nothing_by_that_name"},
        {"batch": 0},
        {"batch": True},
        {"max_seconds": 0},
        {"dry_run": "yes"},
    ],
)
def test_purge__bad_input_is_invalid_and_deletes_nothing(options):
    run_id = ended_order(1)
    age(run_id, days=40)

    with pytest.raises(pw.InvalidInput):
        pw.purge_runs(**options)

    assert WorkflowRun.objects.count() == 2


def test_hold__bad_input_is_invalid():
    run_id = ended_order(1)
    with pytest.raises(pw.InvalidInput):
        pw.hold_run(run_id, hold="yes")
    with pytest.raises(pw.InvalidInput):
        pw.hold_run(run_id, by="ops")
    assert not WorkflowRun.objects.get(pk=run_id).retention_hold
