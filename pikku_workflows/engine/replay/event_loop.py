"""The event loop async step functions run on: owned by one pass (or one step worker's attempt),
created on first use and closed when its owner ends, never one loop per call."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

T = TypeVar("T")


class OwnedEventLoop:
    """A pass's event loop: `run` starts it on first use, `close` ends it (a pass that runs no
    async step function never makes one)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coroutine)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            _cancel_leftover_tasks(loop)
            # Django's async ORM (and sync_to_async) ran the steps' queries on asgiref's own
            # thread: its connection is closed as at the end of a request, by the same thread.
            loop.run_until_complete(sync_to_async(close_old_connections)())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Tasks a step function started and left running end with the loop, not in a later pass."""
    leftover = asyncio.all_tasks(loop)
    for task in leftover:
        task.cancel()
    if leftover:
        loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
