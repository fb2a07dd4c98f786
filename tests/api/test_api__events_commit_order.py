"""The event stream's resume is exact while writers commit out of timestamp order: two writers
of one run, one of them on a clock an hour behind, each holding its transaction open while the
other commits; a client that reconnects after every event with Last-Event-ID."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.api import event_watcher
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import StepStatus
from tests.api.sse import Event, parse_events
from tests.api.test_api__events import events_url

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 200
# Writer "late" records three events per round (pending, running, failed), "early" two.
EVENTS = ROUNDS * 5
JOIN_TIMEOUT = 60


class Writers:
    """Each round: `late` (its clock an hour behind) writes its attempt, then waits while
    `early` writes and commits its own, then commits: its events are stamped before `early`'s
    and commit after them. A round starts once the reader has caught up with the last one."""

    def __init__(self, run: WorkflowRun) -> None:
        self.run = run
        self.received = 0
        self.early_turn = threading.Event()
        self.early_done = threading.Event()
        self.failures: list[BaseException] = []

    def late(self) -> None:
        step = WorkflowStep.objects.create(run=self.run, step_key="late", status="failed")
        for attempt in range(1, ROUNDS + 1):
            self._wait_for_reader(attempt)
            with transaction.atomic():
                skewed = timezone.now() - timedelta(hours=1)
                WorkflowStepHistory.objects.create(
                    step=step,
                    attempt=attempt,
                    status=StepStatus.FAILED,
                    created_at=skewed,
                    running_at=skewed,
                    failed_at=skewed,
                )
                self.early_turn.set()
                assert self.early_done.wait(JOIN_TIMEOUT)
                self.early_done.clear()

    def early(self) -> None:
        step = WorkflowStep.objects.create(run=self.run, step_key="early", status="running")
        for attempt in range(1, ROUNDS + 1):
            assert self.early_turn.wait(JOIN_TIMEOUT)
            self.early_turn.clear()
            now = timezone.now()
            WorkflowStepHistory.objects.create(
                step=step,
                attempt=attempt,
                status=StepStatus.RUNNING,
                created_at=now,
                running_at=now,
            )
            self.early_done.set()

    def start(self, name: str) -> threading.Thread:
        def write() -> None:
            try:
                getattr(self, name)()
            except BaseException as exc:
                self.failures.append(exc)
                self.early_turn.set()
                self.early_done.set()
            finally:
                connection.close()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return thread

    def _wait_for_reader(self, attempt: int) -> None:
        deadline = timezone.now() + timedelta(seconds=JOIN_TIMEOUT)
        while self.received < (attempt - 2) * 5 and timezone.now() < deadline:
            threading.Event().wait(0.005)


def next_event(chunks: Iterator[bytes]) -> Event | None:
    """The stream's next event (heartbeats skipped); None once it ended."""
    for chunk in chunks:
        if parsed := parse_events(chunk.decode()):
            [event] = parsed  # the stream writes one event per chunk
            return event
    return None


@pytest.mark.timeout(300)  # a thousand reconnections on a busy machine
def test_events__reconnecting_after_every_event_gets_each_once_in_seq_order(
    client_for, make_user, fast_stream
):
    # In process: each reconnection is the view and its stream, as a server runs them, without
    # a socket; real HTTP's reconnection is test_api__events' over_http test.
    api = client_for(make_user("watcher", "view_workflowrun"))
    run = WorkflowRun.objects.create(workflow="log.writers")
    writers = Writers(run)
    threads = [writers.start("late"), writers.start("early")]

    received: list[dict[str, Any]] = []
    last_id = -1
    while len(received) < EVENTS and not writers.failures:
        response = api.get(events_url(run.pk), HTTP_LAST_EVENT_ID=str(last_id))
        chunks = iter(response.streaming_content)
        summary = next_event(chunks)
        event = next_event(chunks)
        response.close()  # the client leaves
        assert summary is not None and (summary.event, summary.id) == ("summary", None)
        assert event is not None and event.event == "timeline", event
        assert event.id == event.data["seq"]
        received.append(event.data)
        last_id = event.id
        writers.received = len(received)
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    # The streams the client left gave their watches back.
    assert event_watcher.watcher.watched() == 0

    assert not writers.failures
    assert [event["seq"] for event in received] == list(range(EVENTS))
    identities = {(e["step_key"], e["attempt"], e["event"]) for e in received}
    assert len(identities) == EVENTS
    assert received == pw.get_run_timeline(run.pk)
    # The writers' clocks disagreed by an hour; the log's `at` is the database's commit time.
    assert [e["at"] for e in received] == sorted(e["at"] for e in received)
