"""What a batch of firings costs the database: a fixed set of statements, however many of its
schedules fire (none per schedule), with their ticks, runs and messages all written."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from tests.queue import drain_queue
from tests.schedules import database_now, minute_floor, register_report

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT")


def statements_to_fire(count: int, **options) -> list[str]:
    """Create `count` schedules due now (a batch's worth) and fire them; the statements."""
    WorkflowSchedule.objects.all().delete()
    for index in range(count):
        pw.create_schedule(f"every_minute_{count}_{index}", "report", every="1m", **options)
    nominal = minute_floor(database_now())
    WorkflowSchedule.objects.update(next_nominal_at=nominal, next_fire_at=nominal)
    with CaptureQueriesContext(connection) as captured:
        assert fire_due_schedules() == count
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(TRANSACTION_CONTROL)
    ]


def test_firing__a_batch_costs_four_statements_whatever_its_size():
    register_report()
    few, many = statements_to_fire(2), statements_to_fire(12)
    # 1. claim the due schedules, 2. read their live runs, 3. write the ticks, runs and
    # messages, 4. move each to its next tick.
    assert len(few) == len(many) == 4, "\n".join(many)
    assert "FOR UPDATE" in many[0] and "SKIP LOCKED" in many[0]
    assert many[1].startswith('SELECT "pikku_workflows_workflowrun"."schedule_id"')
    assert "INSERT INTO" in many[2] and "ON CONFLICT (schedule_id, nominal_at)" in many[2]
    assert many[3].startswith('UPDATE "pikku_workflows_workflowschedule"')
    assert WorkflowScheduleTick.objects.filter(outcome="started").count() == 12
    drain_queue()
    assert set(WorkflowRun.objects.values_list("status", flat=True)) == {RunStatus.COMPLETED}


def test_firing__allow_all_schedules_read_no_runs():
    register_report()
    statements = statements_to_fire(5, overlap="allow_all")
    assert len(statements) == 3, "\n".join(statements)
    assert WorkflowRun.objects.count() == 5


def test_firing__skipped_ticks_are_written_in_the_batch_with_their_reason():
    register_report()
    pw.create_schedule("held", "report", every="1m")
    going = pw.trigger_schedule("held")
    nominal = minute_floor(database_now())
    WorkflowSchedule.objects.update(next_nominal_at=nominal, next_fire_at=nominal)
    fire_due_schedules()
    tick = WorkflowScheduleTick.objects.get(nominal_at=nominal)
    assert tick.outcome == "skipped" and going in tick.reason and tick.run_id is None
    schedule = WorkflowSchedule.objects.get()
    assert (schedule.last_outcome, schedule.skipped_in_a_row) == ("skipped", 1)
