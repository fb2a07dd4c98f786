"""Passes racing one run's hand-over (`wf.continue_as_new`) create exactly one successor: the
guarded move to `continued` lets one win, and the others roll back before creating anything."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.continue_transitions import continue_run
from pikku_workflows.engine.store.leases import acquire_run_lease, new_lease_holder
from pikku_workflows.exceptions import InvalidTransition
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus
from tests.concurrency.harness import race

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 4
ROUNDS = 3


@pytest.fixture
def hand_over() -> str:
    @pw.workflow("races.hand_over")
    def hand_over(wf, input):
        if input["link"] == 0:
            wf.do("before", lambda: "done")
            wf.continue_as_new({"link": 1})
        return "second link"

    return "races.hand_over"


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_continue_as_new__passes_racing_the_hand_over_create_one_successor(hand_over, round_number):
    first = pw.start_workflow(hand_over, {"link": 0})

    outcomes = race([lambda _: orchestrate(first)] * THREADS)

    assert outcomes == [None] * THREADS
    run = WorkflowRun.objects.get(pk=first)
    assert run.status == RunStatus.CONTINUED
    successors = WorkflowRun.objects.filter(continued_from=run)
    assert successors.count() == 1
    assert successors.get().input == {"link": 1}


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_continue_run__hand_overs_under_one_lease_race_and_one_wins(hand_over, round_number):
    first = pw.start_workflow(hand_over, {"link": 0})
    holder = new_lease_holder()
    assert acquire_run_lease(first, holder)
    run = WorkflowRun.objects.get(pk=first)

    outcomes = race([lambda _: continue_run(run, {"link": 1}, lease_holder=holder)] * THREADS)

    winners = [o for o in outcomes if isinstance(o, WorkflowRun)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, InvalidTransition) for o in outcomes if o not in winners), outcomes
    assert list(WorkflowRun.objects.filter(continued_from=run).values_list("pk", flat=True)) == [
        winners[0].pk
    ]
