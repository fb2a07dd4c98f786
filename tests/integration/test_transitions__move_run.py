from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pikku_workflows.control_flow import RunInterrupted
from pikku_workflows.engine.store.claims import lock_running_run_txn
from pikku_workflows.engine.store.run_transitions import move_run
from pikku_workflows.exceptions import InvalidTransition
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus
from tests.factories import WorkflowRunFactory

pytestmark = pytest.mark.django_db

AN_HOUR_AGO = timedelta(hours=1)


def _run_last_touched_an_hour_ago(**kwargs) -> WorkflowRun:
    run = WorkflowRunFactory(**kwargs)
    # auto_now does not fire on QuerySet.update, so this sticks until a guarded update.
    WorkflowRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - AN_HOUR_AGO)
    run.refresh_from_db()
    return run


def _snapshot(run_id) -> dict:
    return WorkflowRun.objects.filter(pk=run_id).values().get()


@pytest.mark.parametrize("target", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_move_run__to_terminal_sets_finished_at(target):
    run = _run_last_touched_an_hour_ago()
    assert run.finished_at is None

    move_run(run.pk, target)

    run.refresh_from_db()
    assert run.status == target
    assert run.finished_at is not None
    assert abs(run.finished_at - timezone.now()) < timedelta(minutes=1)


def test_move_run__writes_the_given_fields():
    run = WorkflowRunFactory()

    move_run(run.pk, RunStatus.COMPLETED, expected=[RunStatus.RUNNING], output={"total": 10})

    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"total": 10})


def test_move_run__to_suspended_leaves_finished_at_empty():
    run = WorkflowRunFactory()

    move_run(run.pk, RunStatus.SUSPENDED, error={"code": "WORKFLOW_SUSPENDED", "message": "x"})

    run.refresh_from_db()
    assert run.status == RunStatus.SUSPENDED
    assert run.finished_at is None
    assert run.error["code"] == "WORKFLOW_SUSPENDED"


def test_move_run__back_to_running_clears_finished_at():
    run = WorkflowRunFactory(status=RunStatus.FAILED, finished_at=timezone.now())

    move_run(run.pk, RunStatus.RUNNING, expected=[RunStatus.FAILED])

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.finished_at is None


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (RunStatus.COMPLETED, RunStatus.RUNNING),
        (RunStatus.CANCELLED, RunStatus.RUNNING),
        (RunStatus.COMPLETED, RunStatus.FAILED),
        (RunStatus.SUSPENDED, RunStatus.COMPLETED),
        (RunStatus.RUNNING, RunStatus.RUNNING),
        (RunStatus.CANCELLED, RunStatus.CANCELLED),
    ],
)
def test_move_run__illegal_move_raises_and_changes_nothing(current, target):
    finished_at = (
        timezone.now() - AN_HOUR_AGO
        if current in (RunStatus.COMPLETED, RunStatus.CANCELLED)
        else None
    )
    run = _run_last_touched_an_hour_ago(status=current, finished_at=finished_at)
    before = _snapshot(run.pk)

    with pytest.raises(InvalidTransition) as caught:
        move_run(run.pk, target, output={"should": "not be written"})

    assert (caught.value.current, caught.value.target) == (current, target)
    assert caught.value.code == "INVALID_TRANSITION"
    assert _snapshot(run.pk) == before


def test_move_run__status_outside_expected_raises_and_changes_nothing():
    run = _run_last_touched_an_hour_ago(status=RunStatus.RUNNING)
    before = _snapshot(run.pk)

    with pytest.raises(InvalidTransition) as caught:
        move_run(run.pk, RunStatus.RUNNING, expected=[RunStatus.SUSPENDED])

    assert caught.value.current == RunStatus.RUNNING
    assert _snapshot(run.pk) == before


def test_move_run__illegal_expected_source_refused_before_any_query():
    run = WorkflowRunFactory(status=RunStatus.COMPLETED)

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidTransition):
        move_run(run.pk, RunStatus.CANCELLED, expected=[RunStatus.COMPLETED])

    assert len(queries) == 0


def test_move_run__unknown_run_raises_invalid_transition():
    with pytest.raises(InvalidTransition) as caught:
        move_run("00000000-0000-0000-0000-000000000000", RunStatus.CANCELLED)
    assert caught.value.current is None


def test_move_run__lease_holder_guard_lets_the_holder_move():
    run = WorkflowRunFactory(lease_holder="pass-a", lease_expires_at=timezone.now() + AN_HOUR_AGO)

    move_run(run.pk, RunStatus.COMPLETED, expected=[RunStatus.RUNNING], lease_holder="pass-a")

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED


@pytest.mark.parametrize("holder", ["pass-b", None])
def test_move_run__lease_held_by_another_raises_run_interrupted(holder):
    run = _run_last_touched_an_hour_ago(lease_holder=holder)
    before = _snapshot(run.pk)

    with pytest.raises(RunInterrupted):
        move_run(run.pk, RunStatus.COMPLETED, lease_holder="pass-a", output={"x": 1})

    assert _snapshot(run.pk) == before


def test_move_run__lease_holder_with_wrong_status_is_invalid_transition():
    run = WorkflowRunFactory(status=RunStatus.CANCELLED, lease_holder="pass-a")

    with pytest.raises(InvalidTransition):
        move_run(run.pk, RunStatus.COMPLETED, lease_holder="pass-a")


def test_move_run__updated_at_changes_on_every_guarded_update():
    run = WorkflowRunFactory()
    for target in (RunStatus.SUSPENDED, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.RUNNING):
        stale = timezone.now() - AN_HOUR_AGO
        WorkflowRun.objects.filter(pk=run.pk).update(updated_at=stale)

        move_run(run.pk, target)

        assert WorkflowRun.objects.get(pk=run.pk).updated_at > stale + timedelta(minutes=59), target


def test_lock_running_run_txn__accepts_the_holder_and_writes_nothing():
    run = _run_last_touched_an_hour_ago(lease_holder="pass-a", lease_expires_at=timezone.now())
    before = _snapshot(run.pk)

    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        lock_running_run_txn(run.pk, "pass-a")

    assert _snapshot(run.pk) == before
    if connection.vendor == "postgresql":
        assert any("FOR NO KEY UPDATE" in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize(
    ("status", "holder"),
    [
        (RunStatus.SUSPENDED, "pass-a"),
        (RunStatus.CANCELLED, "pass-a"),
        (RunStatus.RUNNING, "pass-b"),
    ],
)
def test_lock_running_run_txn__refuses_a_run_no_longer_ours(status, holder):
    run = _run_last_touched_an_hour_ago(status=status, lease_holder=holder)
    before = _snapshot(run.pk)

    with pytest.raises(RunInterrupted), transaction.atomic():
        lock_running_run_txn(run.pk, "pass-a")

    assert _snapshot(run.pk) == before
