"""`manage.py pikku schedules`: list schedules, and pause, resume, trigger and backfill one as
a named user who may change schedules (audited as that user)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command

import pikku_workflows as pw
from pikku_workflows.models import WorkflowScheduleAuditEntry
from tests.schedules import register_report, runs_of

pytestmark = pytest.mark.django_db


def pikku(*args: str) -> str:
    out = StringIO()
    call_command("pikku", "schedules", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("ops", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="change_workflowschedule"))
    register_report()
    pw.create_schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Helsinki")
    return user


def test_cli_schedules__list_shows_the_next_fire_local_and_utc(operator):
    listing = pikku("list")
    assert "nightly" in listing and "02:00:00+0" in listing and "UTC" in listing
    (item,) = json.loads(pikku("list", "--json"))
    assert item["name"] == "nightly" and not item["paused"]


def test_cli_schedules__pause_resume_trigger_and_backfill_are_audited_as_the_user(operator):
    pikku("pause", "nightly", "--as", "ops", "--note", "migration")
    assert pw.get_schedule("nightly")["pause_note"] == "migration"
    pikku("resume", "nightly", "--as", "ops")
    assert "Started run" in pikku("trigger", "nightly", "--as", "ops")
    assert len(runs_of("nightly")) == 1
    counted = pikku(
        "backfill",
        "nightly",
        "--as",
        "ops",
        "--dry-run",
        "--start",
        "2025-01-01T00:00:00+00:00",
        "--end",
        "2025-01-08T00:00:00+00:00",
    )
    assert "would start 7 runs" in counted
    actions = WorkflowScheduleAuditEntry.objects.filter(user=operator).values_list(
        "action", flat=True
    )
    assert list(actions) == ["pause", "resume", "trigger"]


def test_cli_schedules__refuses_a_user_without_the_permission_and_bad_input(
    operator, django_user_model
):
    django_user_model.objects.create_user("intern", password="pw")
    with pytest.raises(CommandError, match="may not operate schedules"):
        pikku("pause", "nightly", "--as", "intern")
    with pytest.raises(CommandError, match="INVALID_INPUT"):
        pikku(
            "backfill",
            "nightly",
            "--as",
            "ops",
            "--start",
            "2025-02-01T00:00:00+00:00",
            "--end",
            "2025-01-01T00:00:00+00:00",
        )
    with pytest.raises(CommandError, match="SCHEDULE_NOT_FOUND"):
        pikku("trigger", "weekly", "--as", "ops")
