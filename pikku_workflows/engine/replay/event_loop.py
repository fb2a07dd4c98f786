"""The event loop async step functions run on: owned by one pass (or one step worker's attempt),
created on first use and closed when its owner ends, never one loop per call. Django's async ORM
(and `sync_to_async`) runs the steps' queries on one thread of the loop's own, whose connection
is closed with the loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.db import DatabaseError, connections

T = TypeVar("T")


class OwnedEventLoop:
    """A pass's event loop: `run` starts it on first use, `close` ends it (a pass that runs no
    async step function never makes one)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._orm_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pikku-async-orm")
        # Thread-sensitive calls of the loop's tasks go to `_orm_thread`, not to asgiref's
        # shared thread, nor to the thread of a request that called the pass (which is busy
        # running this loop: that would deadlock).
        self._orm_context = ThreadSensitiveContext()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            SyncToAsync.context_to_thread_executor[self._orm_context] = self._orm_thread
        context = contextvars.copy_context()
        context.run(SyncToAsync.thread_sensitive_context.set, self._orm_context)
        return self._loop.run_until_complete(self._loop.create_task(coroutine, context=context))

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            _cancel_leftover_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            SyncToAsync.context_to_thread_executor.pop(self._orm_context, None)
            # The thread ends with the pass: its connection must not outlive it (a connection
            # the database already broke is gone anyway).
            with contextlib.suppress(DatabaseError):
                self._orm_thread.submit(connections.close_all).result()
            self._orm_thread.shutdown()


def _cancel_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Tasks a step function started and left running end with the loop, not in a later pass."""
    leftover = asyncio.all_tasks(loop)
    for task in leftover:
        task.cancel()
    if leftover:
        loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
