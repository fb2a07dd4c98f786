"""The run state merge on every database (SQLite runs the ORM form): one key replaced, every
other key kept, JSON types as given, and the writer's fence honoured."""

from __future__ import annotations

import pytest

from pikku_workflows.engine.replay.attempts import step_context
from pikku_workflows.engine.store.run_state import merge_run_state
from pikku_workflows.exceptions import StepSuperseded
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import StepStatus
from tests.factories import WorkflowRunFactory, WorkflowStepFactory

pytestmark = [pytest.mark.django_db]


def test_merge_run_state__replaces_one_key_and_keeps_the_others():
    run = WorkflowRunFactory(state={"a": {"nested": 1}, "b": 1})

    assert merge_run_state(run.pk, "a", [])
    assert merge_run_state(run.pk, "a.b", {"x": None})
    assert merge_run_state(run.pk, 'it\'s "quoted"', False)

    assert WorkflowRun.objects.get(pk=run.pk).state == {
        "a": [],
        "b": 1,
        "a.b": {"x": None},
        'it\'s "quoted"': False,
    }


def test_merge_run_state__is_fenced_by_the_lease_or_the_running_attempt():
    run = WorkflowRunFactory(lease_holder="holder", state={})
    step = WorkflowStepFactory(run=run, status=StepStatus.RUNNING)

    assert not merge_run_state(run.pk, "x", 1, lease_holder="someone-else")
    WorkflowStep.objects.filter(pk=step.pk).update(attempt=2)  # a newer attempt took over
    with pytest.raises(StepSuperseded):
        step_context(step, None).set_state("y", 2)

    assert WorkflowRun.objects.get(pk=run.pk).state == {}
