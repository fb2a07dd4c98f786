"""Parallel graph nodes set run state at once: each `ctx.set_state` merges its key in one
statement, so no writer loses another's key."""

from __future__ import annotations

import pytest

from pikku_workflows.engine.replay.attempts import step_context
from pikku_workflows.engine.store.run_state import merge_run_state
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import StepStatus
from tests.concurrency.harness import race
from tests.factories import WorkflowRunFactory, WorkflowStepFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8
ROUNDS = 5


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_set_state__parallel_nodes_writing_different_keys_keep_every_key(round_number):
    run = WorkflowRunFactory(state={"existing": "kept"})
    steps = [
        WorkflowStepFactory(run=run, step_key=f"node[{i}]", status=StepStatus.RUNNING)
        for i in range(THREADS)
    ]

    def writer(index: int):
        def write(_: object) -> None:
            # Each thread reads the row first, as a node's process would have it in memory.
            step = WorkflowStep.objects.get(pk=steps[index].pk)
            step_context(step, None).set_state(f"key-{index}", {"index": index, "list": []})

        return write

    outcomes = race([writer(i) for i in range(THREADS)])

    assert outcomes == [None] * THREADS
    state = WorkflowRun.objects.get(pk=run.pk).state
    assert state == {
        "existing": "kept",
        **{f"key-{i}": {"index": i, "list": []} for i in range(THREADS)},
    }


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_set_state__a_pass_and_nodes_writing_at_once_keep_every_key(round_number):
    run = WorkflowRunFactory(lease_holder="the-pass", state={})
    step = WorkflowStepFactory(run=run, step_key="node", status=StepStatus.RUNNING)

    def by_pass(_: object) -> None:
        assert merge_run_state(run.pk, "from_pass", 1, lease_holder="the-pass")

    def by_node(_: object) -> None:
        node_step = WorkflowStep.objects.get(pk=step.pk)
        step_context(node_step, None).set_state("from_node", 2)

    outcomes = race([by_pass, by_node] * (THREADS // 2))

    assert outcomes == [None] * THREADS
    assert WorkflowRun.objects.get(pk=run.pk).state == {"from_pass": 1, "from_node": 2}


def test_set_state__a_write_of_the_same_key_replaces_it_and_keeps_json_types():
    run = WorkflowRunFactory(state={"a": {"nested": 1}, "b": 1})

    assert merge_run_state(run.pk, "a", [])
    assert merge_run_state(run.pk, "zero", 0)
    assert merge_run_state(run.pk, "no", False)
    assert merge_run_state(run.pk, "none", None)

    assert WorkflowRun.objects.get(pk=run.pk).state == {
        "a": [],
        "b": 1,
        "zero": 0,
        "no": False,
        "none": None,
    }


def test_set_state__a_pass_that_lost_its_lease_writes_nothing():
    run = WorkflowRunFactory(lease_holder="the-new-holder", state={})

    assert not merge_run_state(run.pk, "stale", 1, lease_holder="an-old-holder")
    assert WorkflowRun.objects.get(pk=run.pk).state == {}
