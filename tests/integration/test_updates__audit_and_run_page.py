"""Where updates show: one `update` audit row per accepted update naming who sent it (none for a
refused or repeated one), a `reply` row once the run answers, both in the timeline, and the
run page's Updates section with each update's sender, status and answer."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowAuditEntry
from tests.admin_support import change_url
from tests.integration.test_admin__run_page import text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def positive_price(input, state, payload):
    if payload["price"] <= 0:
        raise pw.UpdateRejected("a price is positive")


@pytest.fixture
def till() -> str:
    """Answers each `add` update with the running total; ends after `input["items"]`."""

    @pw.workflow("audited.till", updates={"add": positive_price})
    def till(wf, input):
        total = 0
        for _ in range(input["items"]):
            message = wf.receive("add")
            total += message.payload["price"]
            wf.reply(message, {"total": total})
        return total

    return "audited.till"


@pytest.fixture
def clerk(django_user_model):
    user = django_user_model.objects.create_user("clerk")
    user.user_permissions.add(Permission.objects.get(codename="signal_workflowrun"))
    return django_user_model.objects.get(pk=user.pk)


def audit_rows(run_id) -> list[tuple[str, str | None, dict]]:
    entries = WorkflowAuditEntry.objects.filter(run_id=run_id).order_by("id")
    return [
        (entry.action, entry.user.username if entry.user else None, entry.payload)
        for entry in entries.select_related("user")
    ]


def test_update__each_accepted_update_is_audited_once_naming_its_sender(till, clerk):
    run_id = pw.start_workflow(till, {"items": 3})
    orchestrate(run_id)  # the run waits in wf.receive

    pw.update(run_id, "add", {"price": 2}, wait="accepted", update_id="first", by=clerk)
    pw.update(run_id, "add", {"price": 2}, wait="accepted", update_id="first", by=clerk)
    pw.update(run_id, "add", {"price": 3}, wait="accepted", update_id="second")
    with pytest.raises(pw.UpdateRejected):
        pw.update(run_id, "add", {"price": 0}, by=clerk)

    assert audit_rows(run_id) == [
        (
            "update",
            "clerk",
            {"update": "add", "update_id": "first", "taken_by_step": "__receive:add"},
        ),
        ("update", None, {"update": "add", "update_id": "second", "taken_by_step": None}),
    ]


def test_update__the_timeline_shows_each_update_and_its_reply(till, clerk):
    run_id = pw.start_workflow(till, {"items": 1})
    pw.update(run_id, "add", {"price": 4}, wait="accepted", update_id="only", by=clerk)

    orchestrate(run_id)
    orchestrate(run_id)  # a replay's wf.reply finds it answered and writes nothing

    assert pw.get_run_status(run_id)["status"] == "completed"
    actions = [event for event in pw.get_run_timeline(run_id) if event["step_key"] is None]
    assert [(event["event"], event["user"]) for event in actions] == [
        ("update", "clerk"),
        ("reply", None),
    ]
    assert audit_rows(run_id)[-1] == ("reply", None, {"update": "add", "update_id": "only"})


def test_run_page__lists_updates_with_sender_status_and_answer(admin_client, till, clerk):
    run_id = pw.start_workflow(till, {"items": 3})
    pw.update(run_id, "add", {"price": 4}, wait="accepted", update_id="answered-one", by=clerk)
    orchestrate(run_id)
    pw.update(run_id, "add", {"price": 5}, wait="accepted", update_id="taken-one")
    # The run's pass has not come yet: the second waits for its receive's pass, and no
    # receive waits for a third.
    pw.update(run_id, "add", {"price": 6}, wait="accepted", update_id="kept-one")

    text = text_of(admin_client.get(change_url(run_id)).content.decode())

    assert "Updates (oldest first)" in text
    assert "add answered-one answered clerk" in text
    assert '"total": 4' in text
    assert "add taken-one taken" in text
    assert "add kept-one accepted" in text
