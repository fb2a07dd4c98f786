"""The cap on a process's open event streams (`MAX_EVENT_STREAMS`): a stream takes a slot
before it starts, or the request is a 503 with `Retry-After`; the slot is given back once,
however its stream ends (the run ended, the client left, the server closed the response)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rest_framework import exceptions, status

from ..conf import pikku_settings

# What a client refused for want of a slot is told to wait before it asks again.
RETRY_AFTER_SECONDS = 5


class TooManyEventStreams(exceptions.APIException):
    """This process already serves as many event streams as MAX_EVENT_STREAMS allows."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "too_many_event_streams"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This server already serves {limit} event streams (MAX_EVENT_STREAMS); "
            f"retry in {RETRY_AFTER_SECONDS} s."
        )
        self.wait = RETRY_AFTER_SECONDS  # DRF answers it as the Retry-After header


class Slot:
    """One stream's place under the cap; `release()` gives it back (once) and runs what the
    stream asked to run then (`on_release`), such as leaving the watcher."""

    def __init__(self, slots: StreamSlots) -> None:
        self._slots = slots
        self._on_release: list[Callable[[], None]] = []
        self._released = False
        self._lock = threading.Lock()

    def on_release(self, callback: Callable[[], None]) -> None:
        self._on_release.append(callback)

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        for callback in self._on_release:
            callback()
        self._slots.give_back()


class StreamSlots:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def take(self) -> Slot:
        """A slot, or TooManyEventStreams (503) when the process holds MAX_EVENT_STREAMS."""
        limit = pikku_settings.MAX_EVENT_STREAMS
        with self._lock:
            if self.taken >= limit:
                raise TooManyEventStreams(limit)
            self.taken += 1
        return Slot(self)

    def give_back(self) -> None:
        with self._lock:
            self.taken -= 1


stream_slots = StreamSlots()
