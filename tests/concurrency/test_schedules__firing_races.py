"""Timer loops racing over the same due schedules, each on its own connection: every due tick
fires exactly once (no duplicate, none missing), and an operator's pause waits for a firing."""

from __future__ import annotations

from collections import Counter

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from tests.concurrency.harness import race
from tests.schedules import database_now, minute_floor, register_report

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SCHEDULES = 120
LOOPS = 4


def test_firing_races__loops_firing_the_same_due_schedules_fire_each_tick_once():
    register_report()
    for index in range(SCHEDULES):
        pw.create_schedule(f"s{index:03d}", "report", every="1m", overlap="allow_all")
    nominal = minute_floor(database_now())
    WorkflowSchedule.objects.update(next_nominal_at=nominal, next_fire_at=nominal)

    def loop(_):
        fired = 0
        while True:
            count = fire_due_schedules()
            if not count:
                return fired
            fired += count

    outcomes = race([loop] * LOOPS)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert sum(outcomes) == SCHEDULES
    per_schedule = Counter(WorkflowScheduleTick.objects.values_list("schedule_id", flat=True))
    assert len(per_schedule) == SCHEDULES and set(per_schedule.values()) == {1}
    runs = Counter(WorkflowRun.objects.values_list("schedule_id", flat=True))
    assert len(runs) == SCHEDULES and set(runs.values()) == {1}
    assert not WorkflowSchedule.objects.filter(next_nominal_at__lte=nominal).exists()
