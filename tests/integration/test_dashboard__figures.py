"""The dashboard's figures against the rows they summarise, on either database: step durations
are the percentiles of the attempts' durations (PostgreSQL's percentile_cont of both fractions
at once, or the same interpolation in Python), and the ended runs' two charts, drawn from one
read, count what the runs say."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from pikku_workflows.observability import dashboard_figures as figures
from pikku_workflows.status import RunStatus, StepStatus
from tests.factories import WorkflowRunFactory, WorkflowStepHistoryFactory

pytestmark = pytest.mark.django_db

WINDOW = figures.WINDOWS["24h"]


def test_step_durations__are_the_percentiles_of_the_attempts_in_the_window():
    now = timezone.now()
    durations = {"tests.fast": [0.1, 0.2, 0.3, 0.4, 5.0], "tests.slow": [2.0, 4.0, 8.0]}
    for function, seconds in durations.items():
        for value in seconds:
            started = now - timedelta(hours=1)
            WorkflowStepHistoryFactory(
                function_name=function,
                status=StepStatus.SUCCEEDED,
                running_at=started,
                succeeded_at=started + timedelta(seconds=value),
            )
    old = now - timedelta(days=2)  # before the window: not counted
    WorkflowStepHistoryFactory(
        function_name="tests.fast", running_at=old, succeeded_at=old + timedelta(hours=1)
    )

    found = figures.step_durations(WINDOW, now)

    assert [name for name, _, _ in found] == ["tests.slow", "tests.fast"]  # slowest p95 first
    for name, p50, p95 in found:
        seconds = durations[name]
        assert p50 == pytest.approx(figures.percentile(seconds, 0.5))
        assert p95 == pytest.approx(figures.percentile(seconds, 0.95))


def test_ended_runs__finished_per_interval_and_failure_rates_count_the_runs():
    now = timezone.now()
    ended_at = now - timedelta(minutes=30)
    for workflow, status, n in (
        ("tests.a", RunStatus.COMPLETED, 3),
        ("tests.a", RunStatus.FAILED, 1),
        ("tests.b", RunStatus.FAILED, 2),
        ("tests.b", RunStatus.CANCELLED, 2),
    ):
        WorkflowRunFactory.create_batch(n, workflow=workflow, status=status, finished_at=ended_at)
    WorkflowRunFactory(
        workflow="tests.b", status=RunStatus.FAILED, finished_at=now - timedelta(days=2)
    )

    ended = figures.ended_runs(WINDOW, now)

    assert figures.failure_rates(ended) == [("tests.b", 2, 4), ("tests.a", 1, 4)]
    finished = figures.runs_finished(ended)
    assert list(finished.values()) == [{"completed": 3, "failed": 3, "cancelled": 2}]
