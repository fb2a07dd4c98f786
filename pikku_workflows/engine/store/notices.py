"""PostgreSQL notices a connection waits for: a caller waiting for an update's answer, a pass
waiting in place at a `wf.receive` for its next update. The writer NOTIFYs in the transaction
that makes the news true, so a notice is never seen before its rows are."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from django.db import DatabaseError, connection

# A wait for a notice ends at least this often, so its caller reads the rows again all the
# same (a connection that dropped its LISTEN, say, costs a second, not the whole wait).
NOTICE_RECHECK_SECONDS = 1.0
# After the connection broke while waiting, the pause before the caller reads again.
BROKEN_PAUSE_SECONDS = 0.05


@contextlib.contextmanager
def listening(channel: str) -> Iterator[Callable[[float], None] | None]:
    """While inside, this connection LISTENs on `channel` (PostgreSQL, outside a transaction:
    a LISTEN inside one would wait for its commit), and the value waits up to the seconds given
    for a notice, at most NOTICE_RECHECK_SECONDS; None where notices do not apply. LISTEN comes
    first: the caller then reads its rows, so news committed in between is read, not missed."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield None
        return
    with connection.cursor() as cursor:
        cursor.execute(f'LISTEN "{channel}"')
    listener = connection.connection
    wait_for_notice = partial(_wait_for_notice, listener)

    try:
        yield wait_for_notice
    finally:
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute(f'UNLISTEN "{channel}"')


def _wait_for_notice(listener: Any, seconds: float) -> None:
    """Wait on psycopg connection `listener` up to `seconds` (at most NOTICE_RECHECK_SECONDS)
    for one notice."""
    # Here, not at the top: on SQLite psycopg may be installed without a libpq to load.
    import psycopg

    timeout = min(seconds, NOTICE_RECHECK_SECONDS)
    try:
        for _ in listener.notifies(timeout=timeout, stop_after=1):
            return
    except psycopg.Error:
        # The connection broke while waiting: the next read reconnects, and the waits left
        # are a bounded poll.
        connection.close()
        time.sleep(min(timeout, BROKEN_PAUSE_SECONDS))


class Listener:
    """LISTENs this connection keeps across several waits (a pass waiting in place at each of
    its `wf.receive`s: one LISTEN for the pass, not one per update), all UNLISTENed by `close`."""

    def __init__(self) -> None:
        self._channels: set[str] = set()
        self._on: Any = None  # the psycopg connection the LISTENs were made on

    def waiter(self, channel: str) -> Callable[[float], None] | None:
        """LISTEN on `channel` (once); the value waits up to the seconds given for a notice on
        any of this listener's channels (a spare one costs its caller a read). None where notices
        do not apply (not PostgreSQL, or inside a transaction)."""
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return None
        connection.ensure_connection()
        if self._on is not connection.connection:
            self._channels.clear()  # a new connection listens to nothing yet
            self._on = connection.connection
        if channel not in self._channels:
            with connection.cursor() as cursor:
                cursor.execute(f'LISTEN "{channel}"')
            self._channels.add(channel)
        return partial(_wait_for_notice, self._on)

    def close(self) -> None:
        if self._channels and self._on is connection.connection:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                for channel in self._channels:
                    cursor.execute(f'UNLISTEN "{channel}"')
        self._channels.clear()
        self._on = None
