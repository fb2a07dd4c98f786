"""The Schedules admin: the list (next fire local and UTC, last outcome, paused, the flag of a
`skip` that skipped many ticks in a row, "code differs"), the edit form (every problem on its
field, nothing written; Preview shows the next 10 fire times with DST shifts marked), pause
with a note, resume, trigger, backfill with its dry-run count first, bulk pause, and the ticks
with why each was skipped or missed."""

from __future__ import annotations

import pytest
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.engine.operations.schedules import upsert_declared_schedules
from pikku_workflows.models import WorkflowBackfill, WorkflowSchedule, WorkflowScheduleAuditEntry
from tests.admin_support import staff_client
from tests.schedules import register_report, runs_of

pytestmark = pytest.mark.django_db

LIST = reverse("admin:pikku_workflows_workflowschedule_changelist")
ADD = reverse("admin:pikku_workflows_workflowschedule_add")
PERMISSIONS = ("view_workflowschedule", "add_workflowschedule", "change_workflowschedule")


def change(schedule: str, verb: str = "change") -> str:
    pk = WorkflowSchedule.objects.get(name=schedule).pk
    return reverse(f"admin:pikku_workflows_workflowschedule_{verb}", args=[pk])


@pytest.fixture
def scheduler(django_user_model):
    register_report()
    return staff_client(django_user_model, "scheduler", *PERMISSIONS)


def form_data(**fields):
    return {
        "name": "nightly",
        "workflow": "report",
        "cron": "0 2 * * *",
        "every": "",
        "timezone": "Europe/Helsinki",
        "input": "null",
        "overlap": "skip",
        "catch_up": "latest",
        "catch_up_window": "1h",
        "catch_up_max": "100",
        "jitter": "",
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        **fields,
    }


def test_admin_schedules__the_form_creates_through_the_engine_audited(scheduler):
    answer = scheduler.post(ADD, form_data())
    assert answer.status_code == 302, answer.context["adminform"].form.errors
    schedule = pw.get_schedule("nightly")
    assert schedule["cron"] == "0 2 * * *" and schedule["managed_by"] == "admin"
    assert WorkflowScheduleAuditEntry.objects.get().user.username == "scheduler"


@pytest.mark.parametrize("overlap", ["buffer_one", "buffer_all"])
def test_admin_schedules__the_form_takes_a_buffering_overlap(scheduler, overlap):
    answer = scheduler.post(ADD, form_data(overlap=overlap))
    assert answer.status_code == 302, answer.context["adminform"].form.errors
    assert pw.get_schedule("nightly")["overlap"] == overlap


def test_admin_schedules__bad_input_is_shown_on_each_field_and_nothing_is_written(scheduler):
    answer = scheduler.post(
        ADD, form_data(cron="61 * * * *", every="5m", timezone="Nowhere/Land", catch_up_max="-1")
    )
    errors = answer.context["adminform"].form.errors
    assert "Bad minute" in " ".join(errors["cron"]) and "not both" in " ".join(errors["cron"])
    assert "unknown time zone" in " ".join(errors["timezone"])
    assert "catch_up_max" in errors
    assert not WorkflowSchedule.objects.exists()


def test_admin_schedules__preview_shows_the_next_ten_with_dst_shifts_and_saves_nothing(scheduler):
    answer = scheduler.post(ADD, form_data(cron="30 2 * * *", _preview="Preview"))
    form = answer.context["adminform"].form
    assert len(form.preview_times) == 10
    assert "Previewed below" in str(form.non_field_errors())
    assert b"schedule-preview" in answer.content
    assert not WorkflowSchedule.objects.exists()
    # Every time in the table is 02:30 local unless the clocks moved it.
    assert all(t.local.strftime("%H:%M") == "02:30" or t.dst_note for t in form.preview_times)


def test_admin_schedules__the_change_page_previews_and_lists_ticks_with_why(scheduler):
    pw.create_schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Helsinki")
    pw.trigger_schedule("nightly")
    pw.trigger_schedule("nightly")  # overlap=skip: skipped, and why
    page = scheduler.get(change("nightly")).content.decode()
    assert page.count("<tr") >= 12 and "pikku-fire-times" in page
    assert "overlap=skip" in page and "triggered" in page
    assert "schedule-pause" in page and "schedule-backfill" in page


def test_admin_schedules__the_list_shows_next_fire_local_and_utc_and_flags(scheduler):
    pw.create_schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Helsinki")
    WorkflowSchedule.objects.update(skipped_in_a_row=9)
    page = scheduler.get(LIST).content.decode()
    assert "UTC" in page and ("EET" in page or "EEST" in page)
    assert "skipped 9 in a row" in page


def test_admin_schedules__code_differs_after_an_admin_edit_of_a_declared_one(scheduler):
    pw.workflow("declared", schedule=pw.Schedule(cron="0 3 * * *"))(lambda wf, input: None)
    upsert_declared_schedules()
    pw.update_schedule("declared", cron="0 4 * * *")
    assert "code differs" in scheduler.get(LIST).content.decode()


def test_admin_schedules__pause_with_a_note_resume_and_trigger(scheduler):
    pw.create_schedule("nightly", "report", cron="0 2 * * *")
    scheduler.post(change("nightly", "pause"), {"note": "supplier down"})
    assert pw.get_schedule("nightly")["pause_note"] == "supplier down"
    scheduler.post(change("nightly", "resume"))
    assert not pw.get_schedule("nightly")["paused"]
    scheduler.post(change("nightly", "trigger"))
    assert len(runs_of("nightly")) == 1


def test_admin_schedules__backfill_counts_first_then_confirms(scheduler):
    pw.create_schedule("nightly", "report", cron="0 2 * * *", timezone="UTC")
    data = {
        "start": "2025-01-01 00:00",
        "end": "2025-01-11 00:00",
        "reprocess": "missing",
        "max_active": "2",
    }
    counted = scheduler.post(change("nightly", "backfill"), {**data, "count": "1"})
    assert counted.context["counted"]["count"] == 10 and not WorkflowBackfill.objects.exists()
    scheduler.post(change("nightly", "backfill"), {**data, "confirm": "1"})
    assert WorkflowBackfill.objects.get().total == 10
    backwards = {**data, "start": data["end"], "end": data["start"], "count": "1"}
    refused = scheduler.post(change("nightly", "backfill"), backwards)
    assert "after start" in str(refused.context["form"].errors)


def test_admin_schedules__bulk_pause(scheduler):
    for name in ("a", "b"):
        pw.create_schedule(name, "report", every="1h")
    pks = list(WorkflowSchedule.objects.values_list("pk", flat=True))
    scheduler.post(LIST, {"action": "pause_schedules", "_selected_action": pks})
    assert WorkflowSchedule.objects.filter(paused=True).count() == 2


def test_admin_schedules__a_viewer_cannot_change(django_user_model):
    register_report()
    pw.create_schedule("nightly", "report", cron="0 2 * * *")
    viewer = staff_client(django_user_model, "viewer", "view_workflowschedule")
    assert viewer.get(LIST).status_code == 200
    assert viewer.post(change("nightly", "pause"), {"note": "x"}).status_code == 403
    assert not pw.get_schedule("nightly")["paused"]
