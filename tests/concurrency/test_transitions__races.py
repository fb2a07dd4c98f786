"""Threads with their own connections race the same guarded update: exactly one may win."""

from __future__ import annotations

from typing import Any

import pytest

from pikku_workflows.engine.store.run_transitions import move_run
from pikku_workflows.engine.store.step_transitions import move_step
from pikku_workflows.exceptions import InvalidTransition, StepSuperseded
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.concurrency.harness import race
from tests.factories import WorkflowRunFactory, WorkflowStepFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8
ROUNDS = 5


def _history(step_id) -> list[tuple]:
    return list(
        WorkflowStepHistory.objects.filter(step_id=step_id)
        .order_by("attempt")
        .values_list("attempt", "status")
    )


def _split(outcomes: list[Any]) -> tuple[list[int], list[BaseException]]:
    winners = [i for i, outcome in enumerate(outcomes) if not isinstance(outcome, BaseException)]
    losers = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    return winners, losers


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_move_step__claims_of_one_pending_attempt_race_and_one_wins(round_number):
    step = WorkflowStepFactory(status=StepStatus.PENDING)

    def read_step() -> WorkflowStep:
        return WorkflowStep.objects.get(pk=step.pk)

    def claim(copy: WorkflowStep) -> None:
        assert (copy.status, copy.attempt) == (StepStatus.PENDING, 1)
        move_step(copy, StepStatus.RUNNING)

    outcomes = race([claim] * THREADS, prepare=read_step)

    winners, losers = _split(outcomes)
    assert len(winners) == 1, outcomes
    assert all(isinstance(loser, InvalidTransition) for loser in losers), losers
    stored = WorkflowStep.objects.get(pk=step.pk)
    assert (stored.status, stored.attempt) == (StepStatus.RUNNING, 1)
    assert _history(step.pk) == [(1, StepStatus.RUNNING)]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_move_step__new_attempts_of_one_failed_step_race_and_one_wins(round_number):
    step = WorkflowStepFactory(status=StepStatus.FAILED, error={"message": "boom"})

    def read_step() -> WorkflowStep:
        return WorkflowStep.objects.get(pk=step.pk)

    def retry(copy: WorkflowStep) -> None:
        assert (copy.status, copy.attempt) == (StepStatus.FAILED, 1)
        move_step(copy, StepStatus.RUNNING, expected=[StepStatus.FAILED], new_attempt=True)

    outcomes = race([retry] * THREADS, prepare=read_step)

    winners, losers = _split(outcomes)
    assert len(winners) == 1, outcomes
    assert all(isinstance(loser, StepSuperseded) for loser in losers), losers
    stored = WorkflowStep.objects.get(pk=step.pk)
    assert (stored.status, stored.attempt) == (StepStatus.RUNNING, 2)
    assert _history(step.pk) == [(1, StepStatus.FAILED), (2, StepStatus.RUNNING)]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_move_step__stale_results_race_a_new_attempt(round_number):
    # Half the threads report attempt 1's result while the others re-claim it: either the
    # result lands on attempt 1 and every re-claim loses, or one re-claim wins and the results
    # are superseded. Never both.
    step = WorkflowStepFactory(status=StepStatus.RUNNING)

    def read_step() -> WorkflowStep:
        return WorkflowStep.objects.get(pk=step.pk)

    def report(copy: WorkflowStep) -> None:
        move_step(copy, StepStatus.SUCCEEDED, expected=[StepStatus.RUNNING], result={"ok": 1})

    def reclaim(copy: WorkflowStep) -> None:
        move_step(copy, StepStatus.RUNNING, expected=[StepStatus.RUNNING], new_attempt=True)

    actions = [report, reclaim] * (THREADS // 2)
    outcomes = race(actions, prepare=read_step)

    winners, losers = _split(outcomes)
    assert len(winners) == 1, outcomes
    assert all(isinstance(loser, InvalidTransition | StepSuperseded) for loser in losers), losers
    stored = WorkflowStep.objects.get(pk=step.pk)
    if actions[winners[0]] is report:
        assert (stored.status, stored.attempt, stored.result) == (
            StepStatus.SUCCEEDED,
            1,
            {"ok": 1},
        )
        assert _history(step.pk) == [(1, StepStatus.SUCCEEDED)]
    else:
        assert (stored.status, stored.attempt, stored.result) == (StepStatus.RUNNING, 2, None)
        assert _history(step.pk) == [(1, StepStatus.RUNNING), (2, StepStatus.RUNNING)]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_move_run__cancel_races_complete_and_one_wins(round_number):
    run = WorkflowRunFactory(status=RunStatus.RUNNING)

    def cancel(_: Any) -> None:
        move_run(run.pk, RunStatus.CANCELLED, error={"code": "WORKFLOW_CANCELLED"})

    def complete(_: Any) -> None:
        move_run(run.pk, RunStatus.COMPLETED, expected=[RunStatus.RUNNING], output={"done": True})

    actions = [cancel, complete] * (THREADS // 2)
    outcomes = race(actions)

    winners, losers = _split(outcomes)
    assert len(winners) == 1, outcomes
    assert all(isinstance(loser, InvalidTransition) for loser in losers), losers
    stored = WorkflowRun.objects.get(pk=run.pk)
    assert stored.finished_at is not None
    if actions[winners[0]] is cancel:
        assert (stored.status, stored.output) == (RunStatus.CANCELLED, None)
        assert stored.error == {"code": "WORKFLOW_CANCELLED"}
    else:
        assert (stored.status, stored.output, stored.error) == (
            RunStatus.COMPLETED,
            {"done": True},
            None,
        )
