"""The event stream of a run that continues as new: its last events are `continued`, naming the
successor, then `end`, whether the client watched the hand-over live or connected after it."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from tests.api.sse import EventStream, parse_events
from tests.api.test_api__events import events_url, streamed
from tests.queue import drain_queue


@pytest.fixture
def relay() -> str:
    """Waits for a `go` signal, then hands over once; the successor ends at once."""

    @pw.workflow("api_tests.relay")
    def relay(wf, input):
        if input["link"] == 2:
            return {"link": 2}
        wf.wait_for_signal("go", "go")
        wf.continue_as_new({"link": 2})

    return "api_tests.relay"


def successor_of(run_id: Any) -> str:
    return pw.get_run_status(run_id)["continued_to"]


@pytest.mark.django_db(transaction=True)
def test_events__a_continued_run_ends_its_stream_naming_its_successor(relay, operator_api):
    run_id = pw.start_workflow(relay, {"link": 1})
    pw.send_signal(run_id, "go")
    drain_queue()

    sent = parse_events(streamed(operator_api.get(events_url(run_id))))

    assert [event.event for event in sent[-2:]] == ["continued", "end"]
    assert sent[-2].data == {"run_id": run_id, "continued_to": successor_of(run_id)}
    assert sent[-1].data["status"] == "continued"


@pytest.mark.django_db(transaction=True)
def test_events__a_stream_watching_the_hand_over_ends_with_the_successor(
    live_server, relay, make_user, fast_stream
):
    make_user("watcher", "view_workflowrun")
    run_id = pw.start_workflow(relay, {"link": 1})
    drain_queue()  # the run waits for its signal
    stream = EventStream(live_server.url + events_url(run_id), "watcher", "pw")
    assert stream.next_event().event == "summary"

    pw.send_signal(run_id, "go")
    drain_queue()
    received = []
    while (event := stream.next_event()) is not None:
        received.append(event)
    stream.close()

    successor = successor_of(run_id)
    assert pw.get_run_status(successor)["status"] == "completed"
    assert [event.event for event in received[-2:]] == ["continued", "end"]
    assert received[-2].data == {"run_id": run_id, "continued_to": successor}
    assert {event.event for event in received[:-2]} == {"timeline"}
