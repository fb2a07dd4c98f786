"""Timer loops racing over the same due schedules, each on its own connection: every due tick
fires exactly once (no duplicate, none missing), and an operator's pause waits for a firing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from tests.concurrency.harness import JOIN_TIMEOUT, race
from tests.schedules import MINUTE, database_now, minute_floor, register_report

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


def test_buffer_races__a_run_ending_while_a_firing_buffers_its_successor_admits_it():
    register_report()
    pw.create_schedule("buffered", "report", every="1m", overlap="buffer_one")
    first, second = (minute_floor(database_now()) - MINUTE * back for back in (2, 1))
    fire_only(first)
    (going,) = WorkflowRun.objects.values_list("pk", flat=True)
    fire_only(second, fire=False)
    buffered, release = threading.Event(), threading.Event()

    def firing() -> None:
        # A timer loop that has read the going run and buffered the tick, not yet committed.
        with transaction.atomic():
            assert fire_due_schedules() == 1
            buffered.set()
            release.wait(JOIN_TIMEOUT)

    loop = threading.Thread(target=lambda: run_closing(firing), daemon=True)
    loop.start()
    assert buffered.wait(JOIN_TIMEOUT)
    ending = threading.Thread(
        target=lambda: run_closing(lambda: pw.cancel_run(going, reason="stop")), daemon=True
    )
    ending.start()
    wait_for_a_lock_wait()  # the ending waits for the schedule the firing holds
    release.set()
    for thread in (loop, ending):
        thread.join(JOIN_TIMEOUT)
        assert not thread.is_alive(), "hung (deadlock?)"
    statuses = dict(WorkflowRun.objects.values_list("scheduled_for", "status"))
    assert statuses == {first: RunStatus.CANCELLED, second: RunStatus.RUNNING}


def fire_only(nominal, *, fire: bool = True) -> None:
    WorkflowSchedule.objects.update(
        next_nominal_at=nominal, next_fire_at=nominal, end_at=nominal + timedelta(seconds=1)
    )
    if fire:
        assert fire_due_schedules() == 1


def run_closing(action) -> None:
    try:
        action()
    finally:
        connection.close()


def wait_for_a_lock_wait() -> None:
    """Until another connection of this database waits on a row lock (or a while passed: the
    test's assertions then tell whether it needed to)."""
    for _ in range(200):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
