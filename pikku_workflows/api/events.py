"""Server-Sent Events of one run (`GET runs/{id}/events/`): its summary, then every new timeline
event (`id:` = its seq) until the run has ended, then an `end` event with the final summary. A
run that continued as new sends a `continued` event naming its successor just before `end`, so a
client follows the chain to the successor's stream.

- Fresh connection: `summary` carries `id:` = the last seq it covers; events after it follow.
- Reconnection (`Last-Event-ID: N`, or `?last_event_id=N` for clients that cannot set headers):
  `summary` without an id (the client keeps N), then every event after N: nothing repeated,
  nothing skipped (the event log numbers events in commit order and never renumbers them).
- A comment line every HEARTBEAT_SECONDS keeps proxies from timing out and finds dead clients.

A stream waits for the process's watcher (`event_watcher`), which asks once per tick, in one
query for every stream, which of their runs changed and wakes those streams; a woken stream
reads its run (status, then timeline) and sends what is new, and reads every RESYNC_SECONDS
regardless. Each read closes the connection it opened, and at most READERS reads run at once in
a process: between reads a stream holds no database connection, under WSGI (a sync iterator in
the request's thread) and ASGI (an async iterator, reading in the sync executor) alike. A stream
takes a slot of `MAX_EVENT_STREAMS` first (`stream_slots`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

import pikku_workflows as pw

from ..models import WorkflowRun
from ..status import TERMINAL_RUN_STATUSES
from .engine_internals import RunMark, changed_runs, last_event_seq, timeline_after
from .event_watcher import watcher
from .stream_slots import Slot

HEARTBEAT_SECONDS = 15.0
RESYNC_SECONDS = 15.0
# Stream reads at once in a process: each opens (and closes) one database connection.
READERS = 4

_readers = threading.BoundedSemaphore(READERS)
T = TypeVar("T")


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


def release_connections() -> None:
    """Close this thread's database connections, except one inside a transaction (a test's, or
    the caller's own): a waiting stream holds none."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


def read_released(read: Callable[[], T]) -> T:
    """`read()`, with at most READERS at once in the process, its connection closed after."""
    with _readers:
        try:
            return read()
        finally:
            release_connections()


class RunEventStream:
    """One stream's state: the last seq it sent, the run's mark when it last read, when it last
    read and wrote. `open()` and `refresh()` read and return the text to send."""

    def __init__(self, run_id: uuid.UUID, last_event_id: int | None) -> None:
        self.run_id = run_id
        self.last_event_id = last_event_id
        self.sent_seq = -1 if last_event_id is None else last_event_id
        self.mark: RunMark = None
        self.synced_at = 0.0
        self.written_at = time.monotonic()
        # Streams opened together (a dashboard's) spread their resyncs instead of reading at once.
        self.resync_seconds = RESYNC_SECONDS * random.uniform(1.0, 1.5)
        self.done = False

    def open(self) -> list[str]:
        # Mark, last seq, then summary: whatever commits between the reads is sent as an event
        # (and may show in the summary already), never skipped.
        self.mark = changed_runs({self.run_id: None}).get(self.run_id)
        summary_id = None
        if self.last_event_id is None:
            self.sent_seq = summary_id = last_event_seq(self.run_id)
        summary = pw.get_run_status(self.run_id)
        chunks = [sse("summary", summary, event_id=summary_id), *self._unsent()]
        if summary["status"] in TERMINAL_RUN_STATUSES:
            chunks += self._end(summary)
        return chunks

    def refresh(self) -> list[str]:
        """The events not sent yet; then `end` if the run has ended (or is gone)."""
        status = WorkflowRun.objects.filter(pk=self.run_id).values_list("status", flat=True)
        try:
            ended = status.get() in TERMINAL_RUN_STATUSES
            chunks = self._unsent()
            if ended:
                chunks += self._end(pw.get_run_status(self.run_id))
        except (WorkflowRun.DoesNotExist, pw.RunNotFound):
            return self._end(None)
        return chunks

    def should_read(self, woken: bool) -> bool:
        return woken or time.monotonic() - self.synced_at >= self.resync_seconds

    def wait_seconds(self) -> float:
        """Until the next heartbeat or resync, whichever comes first."""
        now = time.monotonic()
        heartbeat = HEARTBEAT_SECONDS - (now - self.written_at)
        return max(0.0, min(heartbeat, self.resync_seconds - (now - self.synced_at)))

    def with_heartbeat(self, chunks: list[str]) -> list[str]:
        """`chunks`, or a heartbeat when nothing was written for HEARTBEAT_SECONDS."""
        now = time.monotonic()
        if not chunks and now - self.written_at >= HEARTBEAT_SECONDS:
            chunks = [HEARTBEAT]
        if chunks:
            self.written_at = now
        return chunks

    def _unsent(self) -> list[str]:
        """The events after the last one sent (seqs are never renumbered: the log only grows)."""
        self.synced_at = time.monotonic()
        events = timeline_after(self.run_id, self.sent_seq)
        if events:
            self.sent_seq = events[-1]["seq"]
        return [sse("timeline", event, event_id=event["seq"]) for event in events]

    def _end(self, summary: dict[str, Any] | None) -> list[str]:
        self.done = True
        if summary is None or summary.get("continued_to") is None:
            return [sse("end", summary)]
        continued = {"run_id": summary["id"], "continued_to": summary["continued_to"]}
        return [sse("continued", continued), sse("end", summary)]


def follow(stream: RunEventStream, slot: Slot, wake: Callable[[], None]) -> None:
    """Have the watcher wake the stream when its run changes, until the slot is released."""
    watch = watcher.watch(stream.run_id, stream.mark, wake)
    slot.on_release(lambda: watcher.unwatch(watch))


def sync_stream(stream: RunEventStream, slot: Slot) -> Iterator[str]:
    """The stream for WSGI: waits in the request's thread, holding no connection."""
    woken = threading.Event()
    try:
        release_connections()  # the view's reads are done
        yield from read_released(stream.open)
        if not stream.done:
            follow(stream, slot, woken.set)
        while not stream.done:
            changed = woken.wait(stream.wait_seconds())
            woken.clear()  # before the read: a change after it wakes the stream again
            chunks = read_released(stream.refresh) if stream.should_read(changed) else []
            yield from stream.with_heartbeat(chunks)
    finally:
        slot.release()


async def async_stream(stream: RunEventStream, slot: Slot) -> AsyncIterator[str]:
    """The stream for ASGI: waits on the event loop, reads in the sync executor."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from the watcher's thread
        # A closed loop: the stream is gone, and its slot with it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(woken.set)

    try:
        await sync_to_async(release_connections)()
        for chunk in await sync_to_async(read_released)(stream.open):
            yield chunk
        if not stream.done:
            follow(stream, slot, wake)
        while not stream.done:
            try:
                await asyncio.wait_for(woken.wait(), stream.wait_seconds())
                changed = True
            except TimeoutError:
                changed = False
            woken.clear()
            read = stream.should_read(changed)
            chunks = await sync_to_async(read_released)(stream.refresh) if read else []
            for chunk in stream.with_heartbeat(chunks):
                yield chunk
    finally:
        slot.release()


class EventStreamResponse(StreamingHttpResponse):
    """A stream's response: passed through proxies unbuffered, and its slot given back when the
    server closes it, or when it is dropped unclosed (an ASGI client that left early)."""

    def __init__(self, content: Iterator[str] | AsyncIterator[str], slot: Slot) -> None:
        super().__init__(content, content_type=EventStreamRenderer.media_type)
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"  # nginx: pass each event through at once
        self._give_back = weakref.finalize(self, slot.release)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._give_back()
