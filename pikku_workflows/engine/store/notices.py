"""PostgreSQL notices a connection waits for: a caller waiting for an update's answer, a pass
waiting in place at a `wf.receive` for its next update. The writer NOTIFYs in the transaction
that makes the news true, so a notice is never seen before its rows are."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

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
    # Here, not at the top: on SQLite psycopg may be installed without a libpq to load.
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute(f'LISTEN "{channel}"')
    listener = connection.connection

    def wait_for_notice(seconds: float) -> None:
        timeout = min(seconds, NOTICE_RECHECK_SECONDS)
        try:
            for _ in listener.notifies(timeout=timeout, stop_after=1):
                return
        except psycopg.Error:
            # The connection broke while waiting: the next read reconnects, and the waits
            # left are a bounded poll.
            connection.close()
            time.sleep(min(timeout, BROKEN_PAUSE_SECONDS))

    try:
        yield wait_for_notice
    finally:
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute(f'UNLISTEN "{channel}"')
