"""The schedule operations: definitions checked whole (nothing written on a bad one), edits,
pause and resume, trigger, delete, backfills' dry runs, and schedules declared in code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.backfills import advance_backfills
from pikku_workflows.engine.operations.schedules import upsert_declared_schedules
from pikku_workflows.models import (
    WorkflowBackfill,
    WorkflowSchedule,
    WorkflowScheduleAuditEntry,
    WorkflowScheduleTick,
)
from tests.schedules import database_now, register_report, runs_of

pytestmark = pytest.mark.django_db


def test_create_schedule__writes_the_row_with_its_next_tick_and_an_audit_entry(admin_user):
    register_report()
    schedule = pw.create_schedule(
        "nightly", "report", cron="0 2 * * *", timezone="Europe/Helsinki", by=admin_user
    )
    row = WorkflowSchedule.objects.get(name="nightly")
    assert row.next_fire_at == row.next_nominal_at > database_now()
    assert (
        row.next_nominal_at.astimezone(pw.schedules.wall_clock.zone_of("Europe/Helsinki")).hour == 2
    )
    assert len(schedule["next_fire_times"]) == 10
    assert schedule["next_fire_times"][0]["utc"] == row.next_fire_at.isoformat()
    assert schedule["managed_by"] == "admin" and schedule["cron"] == "0 2 * * *"
    entry = WorkflowScheduleAuditEntry.objects.get()
    assert (entry.action, entry.user, entry.schedule_name) == ("create", admin_user, "nightly")


def test_create_schedule__lists_every_problem_and_writes_nothing():
    with pytest.raises(pw.InvalidInput) as caught:
        pw.create_schedule(
            "nightly",
            "no_such_workflow",
            cron="61 * * * *",
            timezone="Europe/Nowhere",
            catch_up_max=-1,
            start_at=datetime(2026, 2, 1, tzinfo=UTC),
            end_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    problems = "\n".join(caught.value.problems)
    for says in ("no workflow", "Bad minute", "unknown time zone", "catch_up_max", "end_at"):
        assert says in problems
    assert not WorkflowSchedule.objects.exists()
    assert not WorkflowScheduleAuditEntry.objects.exists()


def test_create_schedule__a_taken_name_is_invalid_input():
    register_report()
    pw.create_schedule("nightly", "report", every="1h")
    with pytest.raises(pw.InvalidInput, match="exists already"):
        pw.create_schedule("nightly", "report", every="2h")
    assert WorkflowSchedule.objects.get().every_ms == 3_600_000


def test_update_schedule__a_new_rule_counts_from_now_and_the_schedule_is_the_admins():
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    updated = pw.update_schedule("hourly", cron="*/5 * * * *", every=None)
    row = WorkflowSchedule.objects.get()
    assert row.cron == "*/5 * * * *" and row.every_ms is None
    assert row.next_nominal_at.minute % 5 == 0
    assert row.next_nominal_at - database_now() <= timedelta(minutes=5)
    assert updated["managed_by"] == "admin"


def test_update_schedule__a_bad_edit_changes_nothing():
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    with pytest.raises(pw.InvalidInput) as caught:
        pw.update_schedule("hourly", every=0, timezone="Mars/Olympus")
    assert len(caught.value.problems) == 2
    assert WorkflowSchedule.objects.get().every_ms == 3_600_000


def test_schedule_operations__an_unknown_name_is_schedule_not_found():
    for operation in (pw.get_schedule, pw.pause_schedule, pw.resume_schedule, pw.delete_schedule):
        with pytest.raises(pw.ScheduleNotFound):
            operation("missing")


def test_pause_and_resume__are_audited_with_the_note_and_quiet_when_repeated(admin_user):
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    paused = pw.pause_schedule("hourly", note="vendor outage", by=admin_user)
    pw.pause_schedule("hourly", note="again", by=admin_user)
    assert paused["paused"] and paused["pause_note"] == "vendor outage"
    resumed = pw.resume_schedule("hourly", by=admin_user)
    assert not resumed["paused"] and resumed["pause_note"] == ""
    actions = list(WorkflowScheduleAuditEntry.objects.values_list("action", "note"))
    assert actions == [("create", ""), ("pause", "vendor outage"), ("resume", "")]


def test_trigger_schedule__starts_a_run_now_and_skip_holds_a_second(admin_user):
    register_report()
    pw.create_schedule("hourly", "report", every="1h", input={"full": True})
    run_id = pw.trigger_schedule("hourly", by=admin_user)
    (run,) = runs_of("hourly")
    assert str(run.pk) == run_id and run.input == {"full": True} and run.started_by == admin_user
    assert run.scheduled_for is not None
    assert pw.trigger_schedule("hourly") is None  # overlap=skip: the first is still going
    forced = pw.trigger_schedule("hourly", force=True)
    assert forced is not None and len(runs_of("hourly")) == 2
    outcomes = sorted(WorkflowScheduleTick.objects.values_list("outcome", flat=True))
    assert outcomes == ["skipped", "triggered", "triggered"]


def test_delete_schedule__keeps_its_runs():
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    run_id = pw.trigger_schedule("hourly")
    pw.delete_schedule("hourly")
    assert not WorkflowSchedule.objects.exists()
    assert pw.get_run_status(run_id)["id"] == run_id
    assert WorkflowScheduleAuditEntry.objects.filter(action="delete", schedule=None).exists()


def test_backfill_schedule__dry_run_counts_exactly_and_writes_nothing():
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    start = datetime(2025, 3, 1, tzinfo=UTC)
    result = pw.backfill_schedule(
        "hourly", start=start, end=start + timedelta(days=2), dry_run=True
    )
    assert result["count"] == 48
    assert result["times"][0] == start.isoformat() and result["backfill"] is None
    assert not WorkflowBackfill.objects.exists()


def test_backfill_schedule__missing_leaves_the_nominal_times_that_started_a_run():
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    start = datetime(2025, 3, 1, tzinfo=UTC)
    pw.backfill_schedule("hourly", start=start, end=start + timedelta(hours=3))
    assert advance_backfills() == 1  # max_active=1: the first nominal time, whose run goes on
    again = pw.backfill_schedule(
        "hourly", start=start, end=start + timedelta(hours=3), dry_run=True
    )
    everything = pw.backfill_schedule(
        "hourly", start=start, end=start + timedelta(hours=3), reprocess="all", dry_run=True
    )
    assert again["count"] == 2 and everything["count"] == 3


def test_backfill_schedule__bad_input_lists_every_problem(settings):
    register_report()
    pw.create_schedule("hourly", "report", every="1h")
    start = datetime(2025, 3, 1, tzinfo=UTC)
    with pytest.raises(pw.InvalidInput) as caught:
        pw.backfill_schedule("hourly", start=start, end=start, reprocess="some", max_active=0)
    assert len(caught.value.problems) == 3
    settings.PIKKU_WORKFLOWS = {"BACKFILL_MAX_TICKS": 10}
    with pytest.raises(pw.InvalidInput, match="BACKFILL_MAX_TICKS"):
        pw.backfill_schedule("hourly", start=start, end=start + timedelta(hours=11))
    assert not WorkflowBackfill.objects.exists()


def test_declared_schedules__are_upserted_and_an_admin_edit_survives_deploys():
    pw.workflow("declared", schedule=pw.Schedule(cron="0 3 * * *", timezone="Europe/Helsinki"))(
        lambda wf, input: None
    )
    assert upsert_declared_schedules() == 1
    assert upsert_declared_schedules() == 0
    assert pw.get_schedule("declared")["managed_by"] == "code"
    pw.update_schedule("declared", cron="0 4 * * *")
    assert pw.get_schedule("declared")["code_differs"]
    upsert_declared_schedules()  # a deploy that declares the same
    assert WorkflowSchedule.objects.get().cron == "0 4 * * *"


def test_declared_schedules__a_deploy_changes_a_code_managed_schedule():
    pw.workflow("declared", schedule=pw.Schedule(every="1h"))(lambda wf, input: None)
    upsert_declared_schedules()
    from pikku_workflows.registry import registry

    del registry.workflows["declared"]
    registry.schedule_owners.clear()
    pw.workflow("declared", schedule=pw.Schedule(every="2h"))(lambda wf, input: None)
    assert upsert_declared_schedules() == 1
    row = WorkflowSchedule.objects.get()
    assert row.every_ms == 7_200_000 and row.managed_by == "code"
    assert not pw.get_schedule("declared")["code_differs"]
