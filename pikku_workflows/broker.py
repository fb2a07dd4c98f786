"""A django-q2 broker on the ORM queue table that claims messages FIFO with SKIP LOCKED.

`Q_CLUSTER["broker_class"] = "pikku_workflows.broker.SkipLockedOrmBroker"`. Same table, same
`lock` column and `retry` semantics as django-q2's ORM broker (a claimed message is hidden until
now + `retry`, then re-delivered unless acknowledged); only the dequeue differs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from time import monotonic, sleep
from typing import Any, TypeVar

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    transaction,
)
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from .outages import outages
from .sql import Statements, quoted_table

T = TypeVar("T")

# Every message sent through this broker on PostgreSQL notifies this channel with its queue's
# name; an idle pusher waits on it instead of sleeping out its whole `poll`.
WAKE_CHANNEL = "pikku_workflows_queue"
# While the database is unreachable, the pusher tries again this often (not every `poll`).
OUTAGE_POLL_SECONDS = 1.0

STATEMENTS = Statements(
    Path(__file__).with_name("broker.sql"), names=lambda: {"queue": quoted_table(OrmQ)}
)


class SkipLockedOrmBroker(ORM):
    """Dequeue takes up to `bulk` visible messages in id order in one short transaction.

    The stock ORM broker reads candidates unordered, then compare-and-sets each one's `lock`:
    two pushers read the same rows and all but one lose every race. Here the rows are locked
    with `FOR UPDATE SKIP LOCKED`, so concurrent dequeuers take disjoint messages, and on
    PostgreSQL the claim is one statement (its own transaction: no BEGIN/COMMIT round trips).
    """

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self._idle = True
        self._listening_on: Any = None  # the psycopg connection that LISTENs on WAKE_CHANNEL

    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        # The ORM broker closes stale connections here, and django-q2 calls this for every
        # broker it builds and every message it sends: with health checks on, that is a ping
        # per enqueue, on the caller's connection. The caller (a request, a worker's task)
        # already manages that connection; only the pusher's idle polls need it (`dequeue`).
        return OrmQ.objects.using(Conf.ORM)

    def enqueue(self, task: str) -> Any:
        connection = connections[Conf.ORM]
        if connection.vendor != "postgresql":
            return super().enqueue(task)
        params = {
            "queue": self.list_key or Conf.CLUSTER_NAME,
            "payload": task,
            "lock": timezone.now(),
            "wake_channel": WAKE_CHANNEL,
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["enqueue_message"], params)
            return cursor.fetchone()[0]

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        try:
            claimed = self._claim_visible()
        except (OperationalError, InterfaceError) as exc:
            # django-q2's pusher would log it and exit for its sentinel to start another one.
            outages.failed("taking messages from the queue", exc)
            connections[Conf.ORM].close()
            sleep(max(Conf.POLL, OUTAGE_POLL_SECONDS))
            return None
        self._idle = not claimed
        if claimed:
            return claimed
        self._wait_for_messages(Conf.POLL)  # empty queue, spare the cpu
        return None

    def _claim_visible(self) -> list[tuple[Any, Any]]:
        if self._idle and transaction.get_autocommit(using=Conf.ORM):
            # After an idle poll, drop a connection the server may have closed meanwhile.
            close_old_connections()
        now = timezone.now()
        hidden_until = now + timedelta(seconds=Conf.RETRY)
        return self._retried(lambda: self._claim(now, hidden_until))

    def _wait_for_messages(self, timeout: float) -> None:
        """Return when a message is sent to this queue or after `timeout` seconds.

        On PostgreSQL the pusher LISTENs on its own connection; notifications that arrive while
        it is busy are kept by psycopg and end the next wait at once, so none is missed once
        the LISTEN is in place (before that, the wait is the plain `poll`).
        """
        connection = connections[Conf.ORM]
        if connection.vendor != "postgresql" or not connection.get_autocommit():
            sleep(timeout)
            return
        # Here, not at the top: on SQLite psycopg may be installed without a libpq to load.
        import psycopg

        deadline = monotonic() + timeout
        try:
            listening = self._listening(connection)
            while (left := deadline - monotonic()) > 0:
                for note in listening.notifies(timeout=left, stop_after=1):
                    if note.payload == self.list_key:
                        return
        except (psycopg.Error, DatabaseError):  # raw psycopg while waiting, Django's around it
            connection.close()  # the next dequeue reconnects (and LISTENs again)
            sleep(max(deadline - monotonic(), 0))

    def _listening(self, connection: Any) -> Any:
        connection.ensure_connection()
        if self._listening_on is not connection.connection:
            with connection.cursor() as cursor:
                cursor.execute(f'LISTEN "{WAKE_CHANNEL}"')
            self._listening_on = connection.connection
        return connection.connection

    def delete(self, task_id: Any) -> None:
        # One DELETE, without the ORM's deletion collector (nothing cascades from a message).
        def delete_row() -> None:
            with connections[Conf.ORM].cursor() as cursor:
                cursor.execute(STATEMENTS["delete_message"], {"id": task_id})

        try:
            self._retried(delete_row)
        except (OperationalError, InterfaceError) as exc:
            # An exception here ends django-q2's monitor process. The message is delivered again
            # after `retry`: a prompt twice is harmless, the worker's claim decides.
            outages.failed(f"acknowledging queue message {task_id}", exc)
            connections[Conf.ORM].close()

    def _retried(self, work: Callable[[], T]) -> T:
        """Run `work`; after a connection error, drop the broken connection and run it once more."""
        try:
            return work()
        except (OperationalError, InterfaceError):
            if not transaction.get_autocommit(using=Conf.ORM):
                raise  # inside someone's transaction: not ours to reconnect
            close_old_connections()
            return work()

    def _claim(self, now: Any, hidden_until: Any) -> list[tuple[Any, Any]]:
        if connections[Conf.ORM].vendor == "postgresql":
            return self._claim_in_one_statement(now, hidden_until)
        return self._claim_in_a_transaction(now, hidden_until)

    def _claim_in_one_statement(self, now: Any, hidden_until: Any) -> list[tuple[Any, Any]]:
        params = {
            "queue": self.list_key,
            "now": now,
            "hidden_until": hidden_until,
            "bulk": Conf.BULK,
        }
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute(STATEMENTS["claim_messages"], params)
            rows = cursor.fetchall()
        # RETURNING has no order of its own: hand the messages on oldest first.
        return sorted(rows, key=lambda row: row[0])

    def _claim_in_a_transaction(self, now: Any, hidden_until: Any) -> list[tuple[Any, Any]]:
        queue = OrmQ.objects.using(Conf.ORM)
        with transaction.atomic(using=Conf.ORM):
            rows = list(
                queue.select_for_update(skip_locked=True)
                .filter(key=self.list_key, lock__lt=now)
                .order_by("id")
                .values_list("id", "payload")[: Conf.BULK]
            )
            if rows:
                queue.filter(pk__in=[pk for pk, _ in rows]).update(lock=hidden_until)
        return rows
