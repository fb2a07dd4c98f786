"""factory-boy factories for runs and steps; a step comes with the history row of its attempt."""

from __future__ import annotations

from typing import Any

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import HISTORY_TIMESTAMP, RunStatus, StepStatus


class WorkflowRunFactory(DjangoModelFactory):
    class Meta:
        model = WorkflowRun

    workflow = "tests.workflow"
    status = RunStatus.RUNNING
    input = factory.LazyFunction(dict)


class WorkflowStepFactory(DjangoModelFactory):
    """A step of a run; `history=False` leaves out its history row (a step always has one)."""

    class Meta:
        model = WorkflowStep
        skip_postgeneration_save = True

    run = factory.SubFactory(WorkflowRunFactory)
    step_key = factory.Sequence(lambda n: f"step-{n}")
    function_name = "tests.step_function"
    data = factory.LazyFunction(dict)
    status = StepStatus.PENDING

    @factory.post_generation
    def history(step: WorkflowStep, create: bool, extracted: Any, **kwargs: Any) -> None:
        if not create or extracted is False:
            return
        row = WorkflowStepHistory(
            step=step,
            attempt=step.attempt,
            status=step.status,
            function_name=step.function_name,
            **kwargs,
        )
        if step.status != StepStatus.PENDING:
            setattr(row, HISTORY_TIMESTAMP[step.status], timezone.now())
        row.save(force_insert=True)


class WorkflowStepHistoryFactory(DjangoModelFactory):
    """One attempt of a step (by default its current one, for a step built with `history=False`)."""

    class Meta:
        model = WorkflowStepHistory

    step = factory.SubFactory(WorkflowStepFactory, history=False)
    attempt = factory.LazyAttribute(lambda row: row.step.attempt)
    status = factory.LazyAttribute(lambda row: row.step.status)
    function_name = factory.LazyAttribute(lambda row: row.step.function_name)
