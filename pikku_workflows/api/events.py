"""Server-Sent Events of one run (`GET runs/{id}/events/`): its summary, then every new timeline
event (`id:` = its seq) until the run has ended, then an `end` event with the final summary.

- Fresh connection: `summary` carries `id:` = the last seq it covers; events after it follow.
- Reconnection (`Last-Event-ID: N`, or `?last_event_id=N` for clients that cannot set headers):
  `summary` without an id (the client keeps N), then every event after N: nothing repeated,
  nothing skipped.
- A comment line every HEARTBEAT_SECONDS keeps proxies from timing out and finds dead clients.
- The stream polls the database every POLL_SECONDS with one cheap query (did the run, a step or
  the audit trail change?) and re-reads the timeline only when something did (or every
  RESYNC_SECONDS regardless).

Under WSGI (runserver, gunicorn sync workers) the stream is a sync iterator: it holds a worker
thread and one database connection for its lifetime. Under ASGI it is an async iterator whose
queries run in the thread-sensitive executor, so it holds neither between polls.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Count, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce
from rest_framework.renderers import BaseRenderer

import pikku_workflows as pw

from ..models import WorkflowAuditEntry, WorkflowRun, WorkflowStep
from ..status import TERMINAL_RUN_STATUSES

HEARTBEAT_SECONDS = 15.0
POLL_SECONDS = 0.5
RESYNC_SECONDS = 15.0


def sse(event: str, data: Any, *, event_id: int | None = None) -> str:
    """One event in the text/event-stream format (JSON data on a single `data:` line)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


HEARTBEAT = ": heartbeat\n\n"


class EventStreamRenderer(BaseRenderer):
    """`text/event-stream` for content negotiation; the stream itself is a StreamingHttpResponse,
    so only an error (a 404 before the stream starts) is rendered here: as an `error` event."""

    media_type = "text/event-stream"
    format = "sse"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> bytes:
        return sse("error", data).encode()


def _identity(event: dict[str, Any]) -> tuple[Any, ...]:
    """What makes an event the same event whatever seq it gets (operator actions have no step)."""
    return (event["step_key"], event["attempt"], event["event"], event["at"], event.get("user"))


class RunEventStream:
    """One stream's state: the events it sent. `open()` and `poll()` return the text to send."""

    def __init__(self, run_id: uuid.UUID, last_event_id: int | None) -> None:
        self.run_id = run_id
        self.last_event_id = last_event_id
        self.sent: set[tuple[Any, ...]] = set()
        self.fingerprint: tuple[Any, ...] | None = None
        self.synced_at = 0.0
        self.done = False

    def open(self) -> list[str]:
        # Probe, timeline, then summary: whatever happens between the reads is sent as an event
        # (and may show in the summary already), never skipped.
        self.fingerprint = self._probe()
        events = self._read_timeline()
        summary = pw.get_run_status(self.run_id)
        if self.last_event_id is None:
            self.sent.update(_identity(event) for event in events)
            last = events[-1]["seq"] if events else -1
            chunks = [sse("summary", summary, event_id=last)]
        else:
            seen = [event for event in events if event["seq"] <= self.last_event_id]
            self.sent.update(_identity(event) for event in seen)
            chunks = [sse("summary", summary), *self._unsent(events)]
        if summary["status"] in TERMINAL_RUN_STATUSES:
            chunks.append(self._end(summary))
        return chunks

    def poll(self) -> list[str]:
        try:
            fingerprint = self._probe()
        except pw.RunNotFound:
            self.done = True
            return [sse("end", None)]
        due = time.monotonic() - self.synced_at >= RESYNC_SECONDS
        if fingerprint == self.fingerprint and not due:
            return []
        self.fingerprint = fingerprint
        chunks = self._unsent(self._read_timeline())
        if fingerprint[0] in TERMINAL_RUN_STATUSES:
            chunks.append(self._end(pw.get_run_status(self.run_id)))
        return chunks

    def _read_timeline(self) -> list[dict[str, Any]]:
        self.synced_at = time.monotonic()
        return pw.get_run_timeline(self.run_id)

    def _unsent(self, events: list[dict[str, Any]]) -> list[str]:
        chunks = []
        for event in events:
            identity = _identity(event)
            if identity not in self.sent:
                self.sent.add(identity)
                chunks.append(sse("timeline", event, event_id=event["seq"]))
        return chunks

    def _end(self, summary: dict[str, Any]) -> str:
        self.done = True
        return sse("end", summary)

    def _probe(self) -> tuple[Any, ...]:
        """One query: the run's status and last change, its steps' count and last change, and
        its last audit entry. Every step and run write sets `updated_at`."""
        steps = WorkflowStep.objects.filter(run_id=OuterRef("pk")).order_by().values("run_id")
        audit = WorkflowAuditEntry.objects.filter(run_id=OuterRef("pk")).order_by()
        row = (
            WorkflowRun.objects.filter(pk=self.run_id)
            .annotate(
                steps_changed=Subquery(steps.annotate(last=Max("updated_at")).values("last")),
                step_count=Coalesce(Subquery(steps.annotate(n=Count("pk")).values("n")), 0),
                last_audit=Subquery(audit.values("run_id").annotate(last=Max("id")).values("last")),
            )
            .values_list("status", "updated_at", "steps_changed", "step_count", "last_audit")
            .first()
        )
        if row is None:
            raise pw.RunNotFound(self.run_id)
        return tuple(row)


def sync_stream(stream: RunEventStream) -> Iterator[str]:
    """The stream for WSGI: polls in the request's thread."""
    yield from stream.open()
    written = time.monotonic()
    while not stream.done:
        time.sleep(POLL_SECONDS)
        chunks = stream.poll()
        if chunks:
            yield from chunks
            written = time.monotonic()
        elif time.monotonic() - written >= HEARTBEAT_SECONDS:
            yield HEARTBEAT
            written = time.monotonic()


async def async_stream(stream: RunEventStream) -> AsyncIterator[str]:
    """The stream for ASGI: sleeps on the event loop, queries in the sync executor."""
    for chunk in await sync_to_async(stream.open)():
        yield chunk
    written = time.monotonic()
    while not stream.done:
        await asyncio.sleep(POLL_SECONDS)
        chunks = await sync_to_async(stream.poll)()
        if chunks:
            for chunk in chunks:
                yield chunk
            written = time.monotonic()
        elif time.monotonic() - written >= HEARTBEAT_SECONDS:
            yield HEARTBEAT
            written = time.monotonic()
