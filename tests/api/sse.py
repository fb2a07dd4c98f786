"""A small Server-Sent Events client for the tests: real HTTP, one event at a time, a socket
timeout so a stream that never sends fails the test instead of hanging it."""

from __future__ import annotations

import base64
import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

READ_TIMEOUT_SECONDS = 20


@dataclass
class Event:
    event: str
    data: Any
    id: int | None

    def __repr__(self) -> str:
        return f"<{self.event} id={self.id}>"


def parse_events(text: str) -> list[Event]:
    """Every event of a whole stream's text (comments dropped)."""
    events = []
    for block in text.split("\n\n"):
        event = _parse_block(block.splitlines())
        if event is not None:
            events.append(event)
    return events


def _parse_block(lines: list[str]) -> Event | None:
    fields: dict[str, str] = {}
    for line in lines:
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        fields[name] = value
    if not fields:
        return None
    event_id = fields.get("id")
    return Event(fields["event"], json.loads(fields["data"]), int(event_id) if event_id else None)


class EventStream:
    """`GET url` as an EventSource would, with basic authentication."""

    def __init__(self, url: str, username: str, password: str, last_event_id: int | None = None):
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(
            parts.hostname, parts.port, timeout=READ_TIMEOUT_SECONDS
        )
        credentials = base64.b64encode(f"{username}:{password}".encode()).decode()
        headers = {"Accept": "text/event-stream", "Authorization": f"Basic {credentials}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.connection.request("GET", parts.path, headers=headers)
        self.response = self.connection.getresponse()
        self.comments = 0

    def next_event(self) -> Event | None:
        """The next event; None once the server closed the stream."""
        lines: list[str] = []
        while True:
            raw = self.response.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                self.comments += 1
                continue
            if line:
                lines.append(line)
            elif lines:
                event = _parse_block(lines)
                assert event is not None
                return event

    def close(self) -> None:
        self.response.close()  # its file holds the socket open otherwise
        self.connection.close()
