"""The Server-Sent Events stream of a run: over real HTTP while a run advances and after a
reconnection with Last-Event-ID, the sync (WSGI) and async (ASGI) iterators, heartbeats."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

import pikku_workflows as pw
from pikku_workflows.api import event_watcher, events
from tests.api.conftest import API
from tests.api.sse import EventStream, parse_events
from tests.queue import drain_queue


def events_url(run_id: Any) -> str:
    return f"{API}runs/{run_id}/events/"


def streamed(response: Any) -> str:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    return b"".join(
        chunk.encode() if isinstance(chunk, str) else chunk for chunk in response.streaming_content
    ).decode()


@pytest.mark.django_db
def test_events__ended_run_sends_its_summary_with_the_last_seq_then_end(shop, operator_api):
    run = shop.start()
    timeline = pw.get_run_timeline(run.pk)

    sent = parse_events(streamed(operator_api.get(events_url(run.pk))))

    assert [event.event for event in sent] == ["summary", "end"]
    assert sent[0].id == timeline[-1]["seq"]
    assert sent[0].data == sent[1].data == pw.get_run_status(run.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["header", "query"])
def test_events__after_last_event_id_sends_the_summary_without_id_then_the_rest(
    shop, operator_api, how
):
    run = shop.start()
    timeline = pw.get_run_timeline(run.pk)
    options = {"HTTP_LAST_EVENT_ID": "3"} if how == "header" else {}
    url = events_url(run.pk) + ("?last_event_id=3" if how == "query" else "")

    sent = parse_events(streamed(operator_api.get(url, **options)))

    assert sent[0].event == "summary"
    assert sent[0].id is None  # the client keeps its Last-Event-ID
    assert [event.data for event in sent[1:-1]] == timeline[4:]
    assert [event.id for event in sent[1:-1]] == [event["seq"] for event in timeline[4:]]
    assert sent[-1].event == "end"


@pytest.mark.django_db
def test_events__the_header_wins_over_the_query(shop, operator_api):
    run = shop.start()
    count = len(pw.get_run_timeline(run.pk))

    sent = parse_events(
        streamed(operator_api.get(events_url(run.pk) + "?last_event_id=0", HTTP_LAST_EVENT_ID="-1"))
    )

    assert len(sent) == 2 + count  # summary, every event from seq 0, end


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "-2", "1.5", "9" * 30])
def test_events__malformed_last_event_id_is_invalid_input(shop, operator_api, value):
    run = shop.start()

    response = operator_api.get(events_url(run.pk), HTTP_LAST_EVENT_ID=value)

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"


@pytest.mark.django_db
def test_events__run_not_visible_is_not_found_as_json_or_as_an_error_event(
    shop, make_user, alice, client_for
):
    run = shop.start(make_user("bob"))
    api = client_for(alice)

    as_json = api.get(events_url(run.pk))
    as_stream = api.get(events_url(run.pk), HTTP_ACCEPT="text/event-stream")

    assert as_json.status_code == as_stream.status_code == 404
    assert as_json.json()["code"] == "RUN_NOT_FOUND"
    assert as_stream["Content-Type"].startswith("text/event-stream")
    [error] = parse_events(as_stream.content.decode())
    assert (error.event, error.data["code"]) == ("error", "RUN_NOT_FOUND")


@pytest.mark.django_db
def test_events__heartbeat_comment_while_nothing_happens(shop, operator_api, monkeypatch):
    monkeypatch.setattr(event_watcher, "TICK_SECONDS", 0)
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0)
    run = shop.start(sleep="1h")
    response = operator_api.get(events_url(run.pk))
    chunks = iter(response.streaming_content)

    first, second = next(chunks), next(chunks)
    response.close()

    assert first.startswith(b"id: ") and b"event: summary" in first
    assert second == b": heartbeat\n\n"
    assert response["Cache-Control"] == "no-cache"


@pytest.mark.django_db
def test_events__under_asgi_the_stream_is_an_async_iterator(shop, operator):
    run = shop.start()
    client = AsyncClient()
    client.force_login(operator)

    async def fetch() -> tuple[bool, str]:
        response = await client.get(events_url(run.pk))
        text = "".join([chunk.decode() async for chunk in response.streaming_content])
        return response.is_async, text

    is_async, text = async_to_sync(fetch)()

    assert is_async
    assert [event.event for event in parse_events(text)] == ["summary", "end"]
    assert parse_events(text)[1].data == pw.get_run_status(run.pk)


@pytest.mark.django_db
def test_events__under_asgi_a_live_run_gets_heartbeats(shop, operator, monkeypatch):
    monkeypatch.setattr(event_watcher, "TICK_SECONDS", 0)
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0)
    run = shop.start(sleep="1h")
    client = AsyncClient()
    client.force_login(operator)

    async def first_two() -> list[bytes]:
        response = await client.get(events_url(run.pk))
        chunks = response.streaming_content.__aiter__()
        received = [await chunks.__anext__(), await chunks.__anext__()]
        await chunks.aclose()
        return received

    summary, heartbeat = async_to_sync(first_two)()

    assert b"event: summary" in summary
    assert heartbeat == b": heartbeat\n\n"


@pytest.mark.django_db(transaction=True)
def test_events__over_http_follows_a_run_and_resumes_after_last_event_id(
    live_server, shop, make_user, fast_stream
):
    make_user("watcher", "view_workflowrun")
    run_id = pw.start_workflow("api_tests.order", {"review": True})  # queued, no step yet
    url = live_server.url + events_url(run_id)

    first = EventStream(url, "watcher", "pw")
    assert first.response.status == 200
    assert first.response.getheader("Content-Type") == "text/event-stream"
    summary = first.next_event()
    assert (summary.event, summary.id, summary.data["steps"]) == ("summary", -1, [])

    drain_queue()  # a worker runs reserve and charge; the body then suspends the run
    so_far = pw.get_run_timeline(run_id)
    received = [first.next_event() for _ in so_far]
    first.close()

    assert [(event.event, event.id) for event in received] == [
        ("timeline", event["seq"]) for event in so_far
    ]
    assert [event.data for event in received] == so_far
    assert pw.get_run_status(run_id)["status"] == "suspended"

    # While nobody watches, an operator resumes the run and a worker finishes it.
    pw.resume_run(run_id)
    drain_queue()
    timeline = pw.get_run_timeline(run_id)
    assert timeline[: len(so_far)] == so_far

    second = EventStream(url, "watcher", "pw", last_event_id=received[-1].id)
    rest = []
    while (event := second.next_event()) is not None:
        rest.append(event)
    second.close()

    assert rest[0].event == "summary"
    assert rest[0].id is None
    assert [(event.event, event.id) for event in rest[1:-1]] == [
        ("timeline", event["seq"]) for event in timeline[len(so_far) :]
    ]
    assert [event.data for event in rest[1:-1]] == timeline[len(so_far) :]
    assert rest[1].data["event"] == "resume"  # the operator action that restarted it
    assert rest[-1].event == "end"
    assert rest[-1].data == pw.get_run_status(run_id)
    assert rest[-1].data["status"] == "completed"
