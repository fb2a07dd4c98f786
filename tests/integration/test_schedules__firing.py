"""Firing due schedules: one tick row and at most one run per nominal time, the next tick
written in the same commit; overlap, catch-up, pause_on_failure, start and end; the claim's
lock clause pinned."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from tests.queue import drain_queue
from tests.schedules import (
    MINUTE,
    database_now,
    make_due,
    minute_floor,
    register_report,
    runs_of,
    ticks,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def every_minute(name: str = "minutely", **options) -> str:
    register_report()
    pw.create_schedule(name, "report", every="1m", **options)
    return name


def test_firing__a_due_tick_starts_one_run_and_moves_to_the_next_tick():
    name = every_minute(input={"full": False})
    nominal = make_due(name)
    assert fire_due_schedules() == 1
    assert fire_due_schedules() == 0
    (run,) = runs_of(name)
    assert (run.scheduled_for, run.input) == (nominal, {"full": False})
    assert run.idempotency_key == f"schedule:{name}:{nominal.isoformat()}"
    assert ticks(name) == [(nominal, "started")]
    row = WorkflowSchedule.objects.get()
    assert row.next_nominal_at == nominal + MINUTE and row.last_outcome == "started"
    assert row.next_fire_at > database_now() - MINUTE


def test_firing__the_body_reads_its_nominal_time():
    name = every_minute()
    nominal = make_due(name)
    fire_due_schedules()
    drain_queue()
    (run,) = runs_of(name)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"scheduled_for": nominal.isoformat()}


def test_firing__pw_recover_fires_due_schedules():
    name = every_minute()
    make_due(name)
    assert pw.recover()["schedules"] == 1
    assert len(runs_of(name)) == 1


def test_firing__a_paused_schedule_does_not_fire():
    name = every_minute()
    make_due(name)
    pw.pause_schedule(name, note="hold on")
    assert fire_due_schedules() == 0
    assert not ticks(name)


def test_overlap__skip_records_the_tick_skipped_and_counts_them_in_a_row():
    name = every_minute()
    first = pw.trigger_schedule(name)
    make_due(name)
    fire_due_schedules()
    tick = WorkflowScheduleTick.objects.filter(outcome="skipped").get()
    assert first in tick.reason and "overlap=skip" in tick.reason
    assert WorkflowSchedule.objects.get().skipped_in_a_row == 1
    assert len(runs_of(name)) == 1


def test_overlap__cancel_other_cancels_the_running_one_then_starts():
    name = every_minute(overlap="cancel_other")
    first = pw.trigger_schedule(name)
    make_due(name)
    fire_due_schedules()
    assert WorkflowRun.objects.get(pk=first).status == RunStatus.CANCELLED
    assert [run.status for run in runs_of(name)].count(RunStatus.RUNNING) == 1


def test_overlap__allow_all_starts_beside_the_running_one():
    name = every_minute(overlap="allow_all")
    pw.trigger_schedule(name)
    make_due(name)
    fire_due_schedules()
    assert [run.status for run in runs_of(name)] == [RunStatus.RUNNING, RunStatus.RUNNING]


def test_catch_up__latest_starts_the_newest_missed_tick_inside_the_window():
    register_report()
    start = database_now() - timedelta(hours=2, minutes=30)
    pw.create_schedule("hourly", "report", every="1h", start_at=start, catch_up_window="2h")
    # The loops were down since the first tick: 2h30, 1h30 and 30 minutes ago are due.
    WorkflowSchedule.objects.update(next_nominal_at=start, next_fire_at=start)
    fire_due_schedules()
    # The oldest is outside the window (no row); of the two inside, the newest starts.
    assert ticks("hourly") == [
        (start + timedelta(hours=1), "missed"),
        (start + timedelta(hours=2), "started"),
    ]
    assert WorkflowSchedule.objects.get().next_nominal_at == start + timedelta(hours=3)


def test_catch_up__all_starts_each_missed_tick_up_to_the_cap():
    name = every_minute(overlap="allow_all", catch_up="all", catch_up_window="1h", catch_up_max=3)
    make_due(name, minutes_ago=6)
    fire_due_schedules()
    outcomes = [outcome for _, outcome in ticks(name)]
    assert len(outcomes) == 7
    assert outcomes[:3] == ["missed"] * 3 and outcomes[-1] == "started"
    assert outcomes.count("started") == 4  # three caught up, and the one on time


def test_catch_up__none_starts_only_the_tick_on_time():
    name = every_minute(overlap="allow_all", catch_up="none")
    make_due(name, minutes_ago=4)
    fire_due_schedules()
    outcomes = [outcome for _, outcome in ticks(name)]
    assert outcomes == ["missed"] * 4 + ["started"]


def test_catch_up__ticks_older_than_the_window_get_no_row_each():
    name = every_minute(catch_up="all", catch_up_window="3m")
    make_due(name, minutes_ago=600)
    fire_due_schedules()
    assert 4 <= len(ticks(name)) <= 5
    assert WorkflowSchedule.objects.get().next_nominal_at > database_now() - MINUTE


def test_pause_on_failure__a_failed_run_pauses_its_schedule_naming_it():
    def fails(wf, input):
        raise RuntimeError("the report broke")

    register_report(body=fails)
    pw.create_schedule("minutely", "report", every="1m", pause_on_failure=True)
    make_due("minutely")
    fire_due_schedules()
    drain_queue()
    (run,) = runs_of("minutely")
    assert run.status == RunStatus.FAILED
    schedule = pw.get_schedule("minutely")
    assert schedule["paused"] and str(run.pk) in schedule["pause_note"]


def test_end_at__no_tick_is_left_after_it():
    register_report()
    now = database_now()
    pw.create_schedule("short", "report", every="1m", end_at=now + timedelta(seconds=1))
    row = WorkflowSchedule.objects.get()
    assert row.next_fire_at is None or row.next_fire_at < now + timedelta(seconds=1)
    make_due("short")
    fire_due_schedules()
    assert WorkflowSchedule.objects.get().next_fire_at is None


def test_start_at__the_first_tick_is_start_at():
    register_report()
    start = database_now().replace(microsecond=0) + timedelta(days=1, seconds=7)
    schedule = pw.create_schedule("later", "report", every="1h", start_at=start)
    assert schedule["next_fire_at"] == start.isoformat()


def test_jitter__delays_the_fire_and_keeps_the_nominal_time():
    register_report()
    pw.create_schedule("jittered", "report", every="1h", jitter="10m")
    row = WorkflowSchedule.objects.get()
    assert timedelta() <= row.next_fire_at - row.next_nominal_at < timedelta(minutes=10)


def test_firing__claims_due_rows_for_update_skip_locked():
    name = every_minute()
    make_due(name)
    with CaptureQueriesContext(connection) as queries:
        fire_due_schedules()
    claims = [
        q["sql"]
        for q in queries.captured_queries
        if "workflowschedule" in q["sql"] and "FOR UPDATE" in q["sql"]
    ]
    stripped = re.sub(r"/\*.*?\*/|--[^\n]*", "", claims[0])
    assert re.search(r'FOR UPDATE OF "pikku_workflows_workflowschedule" SKIP LOCKED', stripped)
    assert "next_fire_at" in stripped and "paused" in stripped


def test_firing__a_backfilled_nominal_time_does_not_fire_again():
    name = every_minute(overlap="allow_all")
    nominal = make_due(name)
    pw.backfill_schedule(name, start=nominal, end=nominal + timedelta(seconds=1), max_active=1)
    from pikku_workflows.engine.operations.backfills import advance_backfills

    assert advance_backfills() == 1
    fire_due_schedules()
    assert ticks(name) == [(nominal, "backfill")]
    assert WorkflowRun.objects.count() == 1


def test_firing__a_refused_statement_rolls_its_batch_back_and_the_others_still_fire():
    from tests.faults import refused

    register_report()
    for n in range(3):
        pw.create_schedule(f"s{n}", "report", every="1m", input={"n": n}, overlap="allow_all")
    nominal = minute_floor(database_now())
    WorkflowSchedule.objects.update(next_nominal_at=nominal, next_fire_at=nominal)
    with refused("pikku_workflows_workflowrun", when="NEW.input->>'n' = '1'"):
        assert fire_due_schedules() == 2
    # The refused one wrote nothing and is still due; the others fired once, and moved on.
    assert [name for name in ("s0", "s1", "s2") if ticks(name)] == ["s0", "s2"]
    assert WorkflowSchedule.objects.get(name="s1").next_nominal_at == nominal
    assert fire_due_schedules() == 1
    assert all(len(runs_of(name)) == 1 for name in ("s0", "s1", "s2"))
