from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from pikku_workflows.engine.store.step_transitions import create_step_txn
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import StepStatus
from tests.factories import WorkflowRunFactory

pytestmark = pytest.mark.django_db


def test_create_step_txn__writes_the_step_and_its_first_history_row():
    run = WorkflowRunFactory()

    with transaction.atomic():
        step = create_step_txn(
            run.pk, "charge", function_name="payments.charge", data={"amount": 5}, attempt_limit=4
        )

    stored = WorkflowStep.objects.get(pk=step.pk)
    assert (stored.run_id, stored.step_key, stored.status) == (run.pk, "charge", StepStatus.PENDING)
    assert (stored.function_name, stored.data, stored.attempt_limit) == (
        "payments.charge",
        {"amount": 5},
        4,
    )
    assert stored.attempt == 1
    history = WorkflowStepHistory.objects.get(step=step)
    assert (history.attempt, history.status) == (1, StepStatus.PENDING)
    assert history.created_at is not None
    assert [
        history.scheduled_at,
        history.running_at,
        history.waiting_at,
        history.succeeded_at,
        history.failed_at,
    ] == [None] * 5


@pytest.mark.parametrize(
    ("status", "timestamp"),
    [
        (StepStatus.RUNNING, "running_at"),
        (StepStatus.SCHEDULED, "scheduled_at"),
        (StepStatus.WAITING, "waiting_at"),
        (StepStatus.SUCCEEDED, "succeeded_at"),
    ],
)
def test_create_step_txn__straight_into_a_status_stamps_its_time(status, timestamp):
    run = WorkflowRunFactory()

    with transaction.atomic():
        step = create_step_txn(run.pk, "direct", status=status)

    history = WorkflowStepHistory.objects.get(step=step)
    assert (history.attempt, history.status) == (1, status)
    assert getattr(history, timestamp) == WorkflowStep.objects.get(pk=step.pk).created_at
    assert history.created_at is not None


def test_create_step_txn__duplicate_key_in_a_run_writes_nothing():
    run = WorkflowRunFactory()
    with transaction.atomic():
        create_step_txn(run.pk, "charge")

    with pytest.raises(IntegrityError), transaction.atomic():
        create_step_txn(run.pk, "charge")

    assert WorkflowStep.objects.filter(run=run).count() == 1
    assert WorkflowStepHistory.objects.filter(step__run=run).count() == 1


def test_create_step_txn__same_key_in_another_run_is_fine():
    first, second = WorkflowRunFactory(), WorkflowRunFactory()
    with transaction.atomic():
        create_step_txn(first.pk, "charge")
        create_step_txn(second.pk, "charge")

    assert WorkflowStep.objects.filter(step_key="charge").count() == 2
