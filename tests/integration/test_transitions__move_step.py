from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pikku_workflows.engine.store.step_transitions import move_step
from pikku_workflows.exceptions import InvalidTransition, StepSuperseded
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import HISTORY_TIMESTAMP, StepStatus
from tests.factories import WorkflowStepFactory

pytestmark = pytest.mark.django_db

AN_HOUR_AGO = timedelta(hours=1)
TIMESTAMPS = ["scheduled_at", "running_at", "waiting_at", "succeeded_at", "failed_at"]


def _history(step) -> list[tuple]:
    return list(
        WorkflowStepHistory.objects.filter(step_id=step.pk)
        .order_by("attempt")
        .values_list("attempt", "status", "result", "error")
    )


def _stamped(row: WorkflowStepHistory) -> set[str]:
    return {name for name in TIMESTAMPS if getattr(row, name) is not None}


def _snapshot(step) -> tuple:
    step_row = WorkflowStep.objects.filter(pk=step.pk).values().get()
    history_rows = list(
        WorkflowStepHistory.objects.filter(step_id=step.pk).order_by("attempt").values()
    )
    return step_row, history_rows


def _fresh(step) -> WorkflowStep:
    # Another process's view of the same row, read independently.
    return WorkflowStep.objects.get(pk=step.pk)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (StepStatus.PENDING, StepStatus.RUNNING),
        (StepStatus.PENDING, StepStatus.SCHEDULED),
        (StepStatus.SCHEDULED, StepStatus.RUNNING),
        (StepStatus.RUNNING, StepStatus.WAITING),
        (StepStatus.WAITING, StepStatus.SUCCEEDED),
        (StepStatus.RUNNING, StepStatus.FAILED),
    ],
)
def test_move_step__updates_step_and_history_with_matching_timestamp(source, target):
    step = WorkflowStepFactory(status=source)
    before = timezone.now()

    move_step(step, target)

    assert step.status == target
    assert _fresh(step).status == target
    row = WorkflowStepHistory.objects.get(step_id=step.pk)
    assert (row.attempt, row.status) == (1, target)
    stamp = getattr(row, HISTORY_TIMESTAMP[target])
    assert stamp is not None
    assert stamp >= before - timedelta(seconds=1)


def test_move_step__history_keeps_every_moment_of_the_attempt():
    step = WorkflowStepFactory(status=StepStatus.PENDING)

    move_step(step, StepStatus.SCHEDULED)
    move_step(step, StepStatus.RUNNING)
    move_step(step, StepStatus.SUCCEEDED, result={"ok": True})

    row = WorkflowStepHistory.objects.get(step_id=step.pk)
    assert row.status == StepStatus.SUCCEEDED
    assert _stamped(row) == {"scheduled_at", "running_at", "succeeded_at"}
    assert row.scheduled_at <= row.running_at <= row.succeeded_at


def test_move_step__result_goes_to_step_and_history():
    step = WorkflowStepFactory(status=StepStatus.RUNNING)

    move_step(step, StepStatus.SUCCEEDED, expected=[StepStatus.RUNNING], result={"total": 10})

    assert step.result == {"total": 10}
    assert _fresh(step).result == {"total": 10}
    assert _history(step) == [(1, StepStatus.SUCCEEDED, {"total": 10}, None)]


def test_move_step__error_goes_to_step_and_history():
    error = {"code": "ValueError", "message": "boom"}
    step = WorkflowStepFactory(status=StepStatus.RUNNING)

    move_step(step, StepStatus.FAILED, error=error, wake_at=timezone.now())

    stored = _fresh(step)
    assert (stored.status, stored.error) == (StepStatus.FAILED, error)
    assert stored.wake_at is not None
    assert _history(step) == [(1, StepStatus.FAILED, None, error)]


def test_move_step__new_attempt_increments_attempt_and_adds_a_history_row():
    error = {"code": "ValueError", "message": "boom"}
    step = WorkflowStepFactory(status=StepStatus.RUNNING)
    move_step(step, StepStatus.FAILED, error=error)

    move_step(step, StepStatus.RUNNING, expected=[StepStatus.FAILED], new_attempt=True, error=None)

    assert step.attempt == 2
    stored = _fresh(step)
    assert (stored.status, stored.attempt, stored.error) == (StepStatus.RUNNING, 2, None)
    assert _history(step) == [
        (1, StepStatus.FAILED, None, error),
        (2, StepStatus.RUNNING, None, None),
    ]
    second = WorkflowStepHistory.objects.get(step_id=step.pk, attempt=2)
    assert _stamped(second) == {"running_at"}


def test_move_step__new_attempt_after_a_lapsed_lease():
    step = WorkflowStepFactory(status=StepStatus.RUNNING)

    move_step(step, StepStatus.RUNNING, expected=[StepStatus.RUNNING], new_attempt=True)

    assert (_fresh(step).status, _fresh(step).attempt) == (StepStatus.RUNNING, 2)
    assert _history(step) == [
        (1, StepStatus.RUNNING, None, None),
        (2, StepStatus.RUNNING, None, None),
    ]


def test_move_step__new_attempt_re_armed_as_pending():
    step = WorkflowStepFactory(status=StepStatus.FAILED, attempt=3)

    move_step(step, StepStatus.PENDING, expected=[StepStatus.FAILED], new_attempt=True)

    assert (_fresh(step).status, _fresh(step).attempt) == (StepStatus.PENDING, 4)
    fourth = WorkflowStepHistory.objects.get(step_id=step.pk, attempt=4)
    assert fourth.status == StepStatus.PENDING
    assert _stamped(fourth) == set()


def test_move_step__stale_attempt_is_superseded_and_writes_nothing():
    stale = WorkflowStepFactory(status=StepStatus.RUNNING)
    newer = _fresh(stale)
    move_step(newer, StepStatus.RUNNING, new_attempt=True)
    before = _snapshot(stale)

    with pytest.raises(StepSuperseded) as caught:
        move_step(stale, StepStatus.SUCCEEDED, result={"late": True})

    assert (caught.value.step_key, caught.value.attempt) == (stale.step_key, 1)
    assert caught.value.code == "STEP_SUPERSEDED"
    assert _snapshot(stale) == before
    assert (stale.status, stale.attempt, stale.result) == (StepStatus.RUNNING, 1, None)


def test_move_step__stale_attempt_cannot_start_another_attempt():
    stale = WorkflowStepFactory(status=StepStatus.FAILED)
    move_step(_fresh(stale), StepStatus.RUNNING, new_attempt=True)
    before = _snapshot(stale)

    with pytest.raises(StepSuperseded):
        move_step(stale, StepStatus.RUNNING, new_attempt=True)

    assert _snapshot(stale) == before
    assert _fresh(stale).attempt == 2


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (StepStatus.SUCCEEDED, StepStatus.RUNNING),
        (StepStatus.SUCCEEDED, StepStatus.FAILED),
        (StepStatus.RUNNING, StepStatus.PENDING),
        (StepStatus.PENDING, StepStatus.FAILED),
        (StepStatus.WAITING, StepStatus.SCHEDULED),
    ],
)
def test_move_step__illegal_move_raises_and_writes_nothing(source, target):
    step = WorkflowStepFactory(status=source)
    WorkflowStep.objects.filter(pk=step.pk).update(updated_at=timezone.now() - AN_HOUR_AGO)
    before = _snapshot(step)

    with pytest.raises(InvalidTransition) as caught:
        move_step(step, target, result={"should": "not be written"})

    assert (caught.value.current, caught.value.target) == (source, target)
    assert _snapshot(step) == before
    assert step.status == source


def test_move_step__status_outside_expected_raises_and_writes_nothing():
    step = WorkflowStepFactory(status=StepStatus.PENDING)
    before = _snapshot(step)

    with pytest.raises(InvalidTransition):
        move_step(step, StepStatus.RUNNING, expected=[StepStatus.SCHEDULED])

    assert _snapshot(step) == before


def test_move_step__illegal_expected_source_refused_before_any_write():
    step = WorkflowStepFactory(status=StepStatus.SUCCEEDED)

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidTransition):
        move_step(step, StepStatus.RUNNING, expected=[StepStatus.SUCCEEDED])

    assert not [query for query in queries if "UPDATE" in query["sql"] or "INSERT" in query["sql"]]


def test_move_step__same_attempt_claimed_twice_is_refused():
    # Two claimers read the same pending attempt; only a new attempt may re-enter running.
    first = WorkflowStepFactory(status=StepStatus.PENDING)
    second = _fresh(first)
    move_step(first, StepStatus.RUNNING)
    before = _snapshot(first)

    with pytest.raises(InvalidTransition):
        move_step(second, StepStatus.RUNNING)

    assert _snapshot(first) == before


def test_move_step__same_status_without_new_attempt_is_illegal():
    step = WorkflowStepFactory(status=StepStatus.RUNNING)
    before = _snapshot(step)

    with pytest.raises(InvalidTransition):
        move_step(step, StepStatus.RUNNING, expected=[StepStatus.RUNNING])

    assert _snapshot(step) == before


def test_move_step__updated_at_changes_on_every_guarded_update():
    step = WorkflowStepFactory(status=StepStatus.PENDING)
    moves = [
        (StepStatus.SCHEDULED, False),
        (StepStatus.RUNNING, False),
        (StepStatus.FAILED, False),
        (StepStatus.RUNNING, True),
        (StepStatus.SUCCEEDED, False),
    ]
    for target, new_attempt in moves:
        stale = timezone.now() - AN_HOUR_AGO
        WorkflowStep.objects.filter(pk=step.pk).update(updated_at=stale)

        move_step(step, target, new_attempt=new_attempt)

        assert _fresh(step).updated_at > stale + timedelta(minutes=59), target


def test_move_step__history_failure_rolls_back_the_step_update():
    step = WorkflowStepFactory(status=StepStatus.FAILED)
    # A row already holding the next attempt makes the history insert fail.
    WorkflowStepHistory.objects.create(step=step, attempt=2, status=StepStatus.PENDING)
    before = _snapshot(step)

    with pytest.raises(IntegrityError):
        move_step(step, StepStatus.RUNNING, new_attempt=True)

    assert _snapshot(step) == before
    # The in-memory step still matches the row, so the caller can read it again and retry.
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
