"""Backfills as objects, worked through incrementally: at most `max_active` runs going, in
nominal order, never every run in one transaction; the dry run's count is exact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.backfills import advance_backfills
from pikku_workflows.models import WorkflowBackfill, WorkflowRun, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from tests.schedules import register_report, runs_of

pytestmark = pytest.mark.django_db

START = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def hourly() -> str:
    register_report()
    pw.create_schedule("hourly", "report", every="1h", overlap="allow_all")
    return "hourly"


def finish(run: WorkflowRun) -> None:
    pw.cancel_run(run.pk, reason="done for the test")


def test_backfill__starts_at_most_max_active_runs_in_nominal_order(hourly, admin_user):
    result = pw.backfill_schedule(
        hourly, start=START, end=START + timedelta(hours=5), max_active=2, by=admin_user
    )
    assert result["count"] == 5
    assert advance_backfills() == 2
    assert advance_backfills() == 0  # both still going
    first, second = runs_of(hourly)
    assert (first.scheduled_for, second.scheduled_for) == (START, START + timedelta(hours=1))
    finish(first)
    assert advance_backfills() == 1
    for run in runs_of(hourly):
        if run.status == RunStatus.RUNNING:
            finish(run)
    assert advance_backfills() == 2
    for run in runs_of(hourly):
        if run.status == RunStatus.RUNNING:
            finish(run)
    backfill = WorkflowBackfill.objects.get()
    assert backfill.status == "completed" and backfill.started == 5
    assert [r.scheduled_for for r in runs_of(hourly)] == [
        START + timedelta(hours=h) for h in range(5)
    ]
    assert set(WorkflowScheduleTick.objects.values_list("outcome", flat=True)) == {"backfill"}
    assert all(run.started_by == admin_user for run in runs_of(hourly))


def test_backfill__ten_years_hourly_counts_exactly_and_starts_a_batch_at_a_time(hourly):
    end = START + timedelta(days=3653)
    result = pw.backfill_schedule(hourly, start=START, end=end, max_active=3)
    assert result["count"] == 3653 * 24
    assert advance_backfills() == 3
    assert WorkflowRun.objects.count() == 3
    backfill = WorkflowBackfill.objects.get()
    assert backfill.status == "running" and backfill.cursor == START + timedelta(hours=2)


def test_backfill__failed_reprocesses_only_the_failed_and_the_missing(hourly):
    pw.backfill_schedule(hourly, start=START, end=START + timedelta(hours=3), max_active=3)
    advance_backfills()
    first, second, third = runs_of(hourly)
    WorkflowRun.objects.filter(pk=second.pk).update(status=RunStatus.FAILED)
    for run in (first, third):
        finish(run)
    again = pw.backfill_schedule(
        hourly, start=START, end=START + timedelta(hours=3), reprocess="failed", max_active=3
    )
    assert again["times"] == [(START + timedelta(hours=1)).isoformat()]
    advance_backfills()
    tick = WorkflowScheduleTick.objects.get(nominal_at=START + timedelta(hours=1))
    assert tick.run_id not in (second.pk, None) and tick.outcome == "backfill"
