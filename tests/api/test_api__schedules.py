"""The schedule endpoints: create (every problem of a bad definition listed, nothing
written), read with next fire times, edit, pause, resume, trigger, backfill, ticks, delete;
each needs its model permission."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pikku_workflows.models import WorkflowSchedule, WorkflowScheduleAuditEntry
from tests.api.conftest import API
from tests.schedules import register_report

pytestmark = pytest.mark.django_db

SCHEDULES = f"{API}schedules/"
ALL = (
    "view_workflowschedule",
    "add_workflowschedule",
    "change_workflowschedule",
    "delete_workflowschedule",
)


@pytest.fixture
def scheduler_api(make_user, client_for):
    register_report()
    return client_for(make_user("scheduler", *ALL))


def create(api, **fields):
    body = {"name": "nightly", "workflow": "report", "cron": "0 2 * * *", **fields}
    return api.post(SCHEDULES, body, format="json")


def test_api_schedules__create_answers_201_with_the_next_fire_times(scheduler_api):
    answer = create(scheduler_api, timezone="Europe/Helsinki", input={"full": True})
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["name"] == "nightly" and len(body["next_fire_times"]) == 10
    assert body["next_fire_times"][0]["local"].endswith(("+02:00", "+03:00"))
    entry = WorkflowScheduleAuditEntry.objects.get()
    assert entry.user.username == "scheduler"


@pytest.mark.parametrize("overlap", ["buffer_one", "buffer_all"])
def test_api_schedules__create_takes_a_buffering_overlap(scheduler_api, overlap):
    answer = create(scheduler_api, overlap=overlap)
    assert answer.status_code == 201, answer.json()
    assert answer.json()["overlap"] == overlap
    assert WorkflowSchedule.objects.get().overlap == overlap


def test_api_schedules__a_bad_definition_is_400_listing_every_problem(scheduler_api):
    answer = create(
        scheduler_api,
        workflow="nope",
        cron="61 * * * *",
        timezone="Nowhere/At_All",
        catch_up_max=-1,
    )
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "INVALID_INPUT" and len(body["problems"]) == 4
    assert not WorkflowSchedule.objects.exists()


def test_api_schedules__edit_pause_resume_trigger_and_ticks(scheduler_api):
    create(scheduler_api)
    url = f"{SCHEDULES}nightly/"
    edited = scheduler_api.patch(url, {"cron": "30 3 * * *"}, format="json")
    assert edited.status_code == 200 and edited.json()["cron"] == "30 3 * * *"
    paused = scheduler_api.post(f"{url}pause/", {"note": "month end"}, format="json")
    assert paused.json()["paused"] and paused.json()["pause_note"] == "month end"
    assert not scheduler_api.post(f"{url}resume/").json()["paused"]
    run_id = scheduler_api.post(f"{url}trigger/", {}, format="json").json()["run_id"]
    assert run_id is not None
    assert scheduler_api.post(f"{url}trigger/", {}, format="json").json() == {"run_id": None}
    ticks = scheduler_api.get(f"{url}ticks/").json()
    assert [t["outcome"] for t in ticks] == ["skipped", "triggered"]  # newest first
    skipped = scheduler_api.get(f"{url}ticks/", {"outcome": "skipped"}).json()
    assert len(skipped) == 1 and "overlap=skip" in skipped[0]["reason"]


def test_api_schedules__backfill_dry_run_counts_and_bad_ranges_are_400(scheduler_api):
    create(scheduler_api, cron="0 * * * *")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    url = f"{SCHEDULES}nightly/backfill/"
    body = {
        "start": start.isoformat(),
        "end": (start + timedelta(days=1)).isoformat(),
        "dry_run": True,
    }
    answer = scheduler_api.post(url, body, format="json")
    assert answer.status_code == 200 and answer.json()["count"] == 24
    backwards = {"start": body["end"], "end": body["start"]}
    assert scheduler_api.post(url, backwards, format="json").status_code == 400


def test_api_schedules__unknown_is_404_and_delete_is_204(scheduler_api):
    assert scheduler_api.get(f"{SCHEDULES}missing/").json()["code"] == "SCHEDULE_NOT_FOUND"
    create(scheduler_api)
    assert scheduler_api.delete(f"{SCHEDULES}nightly/").status_code == 204
    assert not WorkflowSchedule.objects.exists()


def test_api_schedules__each_action_needs_its_permission(make_user, client_for):
    register_report()
    viewer = client_for(make_user("viewer", "view_workflowschedule"))
    assert viewer.get(SCHEDULES).status_code == 200
    assert create(viewer).status_code == 403
    nobody = client_for(make_user("nobody"))
    assert nobody.get(SCHEDULES).status_code == 403
