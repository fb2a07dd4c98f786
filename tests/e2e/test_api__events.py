"""The API's live event stream over real HTTP while a real `pikku_worker` advances the run:
started through the API, watched, dropped mid-run, resumed with Last-Event-ID, closed at the end."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest
from django.contrib.auth.models import Permission

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.api import event_watcher, events
from tests.api.sse import EventStream

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

STEPS = 6


@pytest.fixture
def watcher(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = django_user_model.objects.create_user("watcher", password="pw")
    user.user_permissions.add(*Permission.objects.filter(codename__in=["add_workflowrun"]))
    return user


def start_through_the_api(base_url: str) -> str:
    request = urllib.request.Request(
        f"{base_url}/api/workflows/definitions/e2e.count/runs/",
        data=json.dumps({"input": {"steps": STEPS, "seconds": 0.3}}).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(b"watcher:pw").decode(),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def test_events__a_real_worker_advances_the_run_while_a_client_watches_and_reconnects(
    live_server, start_worker, watcher, monkeypatch
):
    monkeypatch.setattr(event_watcher, "TICK_SECONDS", 0.05)
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0.5)
    start_worker()
    run_id = start_through_the_api(live_server.url)
    url = f"{live_server.url}/api/workflows/runs/{run_id}/events/"

    first = EventStream(url, "watcher", "pw")
    summary = first.next_event()
    assert summary.event == "summary"
    received = []
    while len(received) < 4:  # a few events in, the client drops the connection mid-run
        event = first.next_event()
        assert event is not None and event.event == "timeline"
        received.append(event)
    first.close()
    assert pw.get_run_status(run_id)["status"] == "running"

    second = EventStream(url, "watcher", "pw", last_event_id=received[-1].id)
    rest = []
    while (event := second.next_event()) is not None:
        rest.append(event)
    second.close()

    timeline = pw.get_run_timeline(run_id)
    resumed = [event for event in rest if event.event == "timeline"]
    assert [event.event for event in rest] == ["summary", *["timeline"] * len(resumed), "end"]
    assert rest[0].id is None
    skipped = summary.id + 1  # events the first summary already covered
    assert [e.data for e in received + resumed] == timeline[skipped:]
    assert [e.id for e in received + resumed] == [e["seq"] for e in timeline[skipped:]]
    assert rest[-1].data == pw.get_run_status(run_id)
    assert rest[-1].data["status"] == "completed"
    assert len([step for step in rest[-1].data["steps"] if step["status"] == "succeeded"]) == STEPS
