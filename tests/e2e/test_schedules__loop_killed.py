"""`manage.py pikku_recover` killed with SIGKILL while it writes a batch of firings: the batch
rolls back whole (no tick, run or queue message of it is left), and the next firing fires each
schedule exactly once, one run and one message each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from django_q.models import OrmQ

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflow the firing process starts
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from tests.conftest import wait_until
from tests.e2e.conftest import REPO_ROOT, worker_database_url
from tests.faults import busy_backends, slowed
from tests.schedules import database_now, minute_floor

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

TICK = WorkflowScheduleTick._meta.db_table
SCHEDULES = 30


def test_firing__a_loop_killed_mid_batch_leaves_nothing_and_each_tick_fires_once():
    # Hourly from this minute: a test that straddles a minute's end must not find each
    # schedule's next tick due as well (its catch-up would record the one fired now as missed).
    nominal = minute_floor(database_now())
    for index in range(SCHEDULES):
        pw.create_schedule(
            f"s{index:02d}", "e2e.nap", every="1h", start_at=nominal, overlap="allow_all"
        )
    WorkflowSchedule.objects.update(next_nominal_at=nominal, next_fire_at=nominal)
    messages_before = OrmQ.objects.count()
    # Each inserted tick costs 100 ms: the batch's one statement takes seconds, long enough to
    # be killed in the middle of.
    with slowed(TICK, seconds=0.1):
        loop = subprocess.Popen(
            [sys.executable, "manage.py", "pikku_recover"],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "DATABASE_URL": worker_database_url(),
                "PIKKU_EXTRA_WORKFLOW_MODULES": "tests.e2e.workflows",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: busy_backends("WITH version"), 60, "the loop to write its batch")
        finally:
            loop.send_signal(signal.SIGKILL)
            loop.wait(10)
            wait_until(lambda: not busy_backends(), 30, "the killed loop's backend to end")

    assert not WorkflowScheduleTick.objects.exists()
    assert not WorkflowRun.objects.exists()
    assert OrmQ.objects.count() == messages_before
    fired = 0
    while count := fire_due_schedules():
        fired += count
    assert fired == SCHEDULES
    per_schedule = Counter(WorkflowScheduleTick.objects.values_list("schedule_id", flat=True))
    assert len(per_schedule) == SCHEDULES and set(per_schedule.values()) == {1}
    runs = Counter(WorkflowRun.objects.values_list("schedule_id", flat=True))
    assert len(runs) == SCHEDULES and set(runs.values()) == {1}
    assert OrmQ.objects.count() == messages_before + SCHEDULES
