"""`manage.py pikku`: list, show and time-line runs from a shell, and act on them as a named,
permitted user (audited as that user), with `--json` for scripts."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from tests.admin_support import staff_client
from tests.shop import Shop

pytestmark = pytest.mark.django_db


def pikku(*args: str) -> str:
    out = StringIO()
    call_command("pikku", *args, stdout=out)
    return out.getvalue()


def test_cli__runs_lists_newest_first_with_filters(shop: Shop):
    failed = shop.failed()
    completed = shop.start()

    listing = pikku("runs")
    assert listing.index(str(completed.pk)[:8]) < listing.index(str(failed.pk)[:8])
    assert "STEP_FAILED: Step 'charge' failed: gateway down" in listing
    only_failed = json.loads(pikku("runs", "--status", "failed", "--json"))
    assert [run["id"] for run in only_failed] == [str(failed.pk)]
    assert json.loads(pikku("runs", "--workflow", "nope", "--json")) == []
    assert len(json.loads(pikku("runs", "--since", "1h", "--json"))) == 2
    assert json.loads(pikku("runs", "--since", "2999-01-01", "--json")) == []


def test_cli__show_and_timeline_by_an_id_prefix(shop: Shop):
    run = shop.start(sleep="1h")
    prefix = str(run.pk)[:8]

    shown = pikku("show", prefix)
    assert f"run       {run.pk}" in shown
    assert "waits on  timer cool-off" in shown
    assert "charge" in shown and "succeeded" in shown
    assert json.loads(pikku("show", prefix, "--json")) == pw.get_run_status(run.pk)
    timeline = pikku("timeline", str(run.pk))
    assert "cool-off" in timeline and "scheduled" in timeline
    assert json.loads(pikku("timeline", prefix, "--json")) == pw.get_run_timeline(run.pk)


def test_cli__actions_are_audited_as_the_user_given(shop: Shop, admin_user: Any):
    run = shop.start(sleep="1h")

    out = pikku("suspend", str(run.pk), "--reason", "stock check", "--as", "admin")
    assert "is suspended (suspend as admin)" in out
    summary = json.loads(pikku("resume", str(run.pk), "--as", "admin", "--json"))
    assert summary["status"] == "running"
    pikku("cancel", str(run.pk)[:6], "--reason", "customer called", "--as", "admin")

    audit = WorkflowAuditEntry.objects.filter(run=run).order_by("created_at", "id")
    assert [(e.action, e.user, e.reason) for e in audit] == [
        ("suspend", admin_user, "stock check"),
        ("resume", admin_user, ""),
        ("cancel", admin_user, "customer called"),
    ]


def test_cli__retry_and_fork(shop: Shop, admin_user: Any):
    run = shop.failed()
    assert json.loads(pikku("retry", str(run.pk), "--as", "admin", "--json"))["status"] == "running"
    completed = shop.start()

    forked = json.loads(
        pikku("fork", str(completed.pk), "--from-step", "ship", "--as", "admin", "--json")
    )

    fork = WorkflowRun.objects.get(pk=forked["id"])
    assert (fork.forked_from_id, fork.started_by) == (completed.pk, admin_user)


def test_cli__an_action_needs_as_and_a_permitted_user(shop: Shop, django_user_model: Any):
    run = shop.start(sleep="1h")
    staff_client(django_user_model, "viewer", "view_workflowrun")

    with pytest.raises(CommandError, match="--as"):
        pikku("cancel", str(run.pk), "--reason", "x")
    with pytest.raises(CommandError, match="No user 'ghost'"):
        pikku("cancel", str(run.pk), "--reason", "x", "--as", "ghost")
    with pytest.raises(CommandError, match="viewer may not cancel runs"):
        pikku("cancel", str(run.pk), "--reason", "x", "--as", "viewer")
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"


def test_cli__refusals_and_unknown_runs_are_command_errors(shop: Shop, admin_user: Any):
    completed = shop.start()

    with pytest.raises(CommandError, match="INVALID_TRANSITION"):
        pikku("suspend", str(completed.pk), "--reason", "late", "--as", "admin")
    with pytest.raises(CommandError, match="No run has an id starting with 'ffffffff'"):
        pikku("show", "ffffffff")
    with pytest.raises(CommandError, match="not a run id"):
        pikku("show", "ab")
