"""Event streams under load: open streams hold no database connection between their reads (over
real HTTP, under a WSGI and an ASGI server), one watcher per process asks in one query which watched runs changed
and wakes those streams only, and MAX_EVENT_STREAMS caps a process's streams with a 503 and
`Retry-After`, each slot given back however its stream ends. Timings are bench/streams.py's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from django.core.asgi import get_asgi_application
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.api import event_watcher, events
from pikku_workflows.api.event_watcher import RunWatcher
from pikku_workflows.api.stream_slots import RETRY_AFTER_SECONDS, stream_slots
from pikku_workflows.engine.operations.run_changes import changed_runs
from tests.api.conftest import API
from tests.api.sse import EventStream, parse_events

WAIT_SECONDS = 10


def events_url(run: Any) -> str:
    return f"{API}runs/{run.pk}/events/"


def other_connections() -> int:
    """Connections to this test database besides the test's own: the server's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def eventually(condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within WAIT_SECONDS (a closed connection's server process takes
    a moment to leave pg_stat_activity)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def only_the_watchers() -> bool:
    return other_connections() <= 1


@pytest.fixture
def fast_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_watcher, "TICK_SECONDS", 0.02)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_streams__hold_no_connection_between_reads_over_http(
    live_server, shop, make_user, fast_watcher, monkeypatch
):
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0.2)  # how the server finds a client gone
    make_user("watcher", "view_workflowrun")
    run = shop.start(sleep="1h")
    streams = [EventStream(live_server.url + events_url(run), "watcher", "pw") for _ in range(6)]
    assert [stream.next_event().event for stream in streams] == ["summary"] * 6

    # Six open streams: the watcher's one connection, however many streams wait.
    assert eventually(only_the_watchers)
    pw.send_signal(run.pk, "early")  # kept (nothing waits for it), audited: a timeline event
    assert [stream.next_event().data["event"] for stream in streams] == ["signal"] * 6
    assert eventually(only_the_watchers)

    for stream in streams:
        stream.close()
    # Nothing left to watch: the watcher lets its connection go too.
    assert eventually(lambda: other_connections() == 0)
    assert stream_slots.taken == 0


@pytest.fixture
def live_asgi_server() -> Iterator[str]:
    """The project's ASGI application under uvicorn, in a thread of this process (so it uses the
    test database): each request in its own thread-sensitive context, as in production."""
    config = uvicorn.Config(
        get_asgi_application(), host="127.0.0.1", port=0, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert eventually(lambda: server.started)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(WAIT_SECONDS)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_streams__under_asgi_hold_no_connection_between_reads(
    live_asgi_server, shop, make_user, fast_watcher, monkeypatch
):
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0.2)
    make_user("watcher", "view_workflowrun")
    run = shop.start(sleep="1h")
    streams = [EventStream(live_asgi_server + events_url(run), "watcher", "pw") for _ in range(6)]
    assert [stream.next_event().event for stream in streams] == ["summary"] * 6

    assert eventually(only_the_watchers)
    pw.send_signal(run.pk, "early")
    assert [stream.next_event().data["event"] for stream in streams] == ["signal"] * 6
    assert eventually(only_the_watchers)

    for stream in streams:
        stream.close()
    assert eventually(lambda: other_connections() == 0)
    assert eventually(lambda: stream_slots.taken == 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_watcher__one_query_per_tick_wakes_only_the_streams_of_changed_runs(shop, fast_watcher):
    quiet, busy = shop.start(sleep="1h"), shop.start(sleep="1h")
    with CaptureQueriesContext(connection) as queries:
        marks = changed_runs({quiet.pk: None, busy.pk: None})
    assert len(queries) == 1
    assert set(marks) == {quiet.pk, busy.pk}
    watcher = RunWatcher()
    woken = {run.pk: threading.Event() for run in (quiet, busy)}
    watches = [watcher.watch(pk, marks[pk], woken[pk].set) for pk in woken]
    try:
        time.sleep(3 * event_watcher.TICK_SECONDS)
        assert not any(event.is_set() for event in woken.values())

        pw.send_signal(busy.pk, "early")

        assert woken[busy.pk].wait(WAIT_SECONDS)
        time.sleep(3 * event_watcher.TICK_SECONDS)
        assert not woken[quiet.pk].is_set()
        assert changed_runs({quiet.pk: marks[quiet.pk], busy.pk: marks[busy.pk]}).keys() == {
            busy.pk
        }
    finally:
        for watch in watches:
            watcher.unwatch(watch)
    assert watcher.watched() == 0


# Transactional: closing a response as a server does closes the request's connection, which
# would end the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_streams__over_max_event_streams_are_503_with_retry_after(shop, operator_api, settings):
    settings.PIKKU_WORKFLOWS = {"MAX_EVENT_STREAMS": 2}
    run = shop.start(sleep="1h")
    assert stream_slots.taken == 0
    opened = [operator_api.get(events_url(run)) for _ in range(2)]

    refused = operator_api.get(events_url(run))
    as_stream = operator_api.get(events_url(run), HTTP_ACCEPT="text/event-stream")

    assert [response.status_code for response in opened] == [200, 200]
    assert refused.status_code == as_stream.status_code == 503
    assert refused["Retry-After"] == as_stream["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert refused.json()["code"] == "TOO_MANY_EVENT_STREAMS"
    assert "MAX_EVENT_STREAMS" in refused.json()["detail"]
    [error] = parse_events(as_stream.content.decode())
    assert (error.event, error.data["code"]) == ("error", "TOO_MANY_EVENT_STREAMS")
    # A stream that ends gives its slot back, even one that never sent a byte.
    opened.pop().close()
    opened.append(operator_api.get(events_url(run)))
    assert opened[-1].status_code == 200
    for response in opened:
        response.close()
    assert stream_slots.taken == 0


@pytest.mark.django_db(transaction=True)
def test_streams__a_stream_that_reaches_the_end_of_its_run_gives_its_slot_back(
    shop, operator_api, monkeypatch
):
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0)
    ended, live = shop.start(), shop.start(sleep="1h")
    assert stream_slots.taken == 0

    text = b"".join(operator_api.get(events_url(ended)).streaming_content).decode()
    assert [event.event for event in parse_events(text)] == ["summary", "end"]
    assert stream_slots.taken == 0

    response = operator_api.get(events_url(live))
    chunks = iter(response.streaming_content)
    next(chunks), next(chunks)  # the summary, a heartbeat
    assert stream_slots.taken == 1
    response.close()  # the client left
    assert stream_slots.taken == 0
