"""`pikku_workflows.broker.SkipLockedOrmBroker`: FIFO claims, acknowledgement, and re-delivery
after django-q2's `retry` window, like the ORM broker it replaces."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django_q.conf import Conf
from django_q.models import OrmQ

from pikku_workflows.broker import WAKE_CHANNEL, SkipLockedOrmBroker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOIN_SECONDS = 30


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> SkipLockedOrmBroker:
    monkeypatch.setattr(Conf, "BULK", 3)
    monkeypatch.setattr(Conf, "POLL", 0)
    return SkipLockedOrmBroker(list_key="bench-q")


def enqueue(broker: SkipLockedOrmBroker, count: int) -> list[int]:
    return [broker.enqueue(f"payload-{i}") for i in range(count)]


def test_dequeue__takes_up_to_bulk_messages_oldest_first(broker):
    ids = enqueue(broker, 5)

    first, second = broker.dequeue(), broker.dequeue()

    assert first == [(ids[0], "payload-0"), (ids[1], "payload-1"), (ids[2], "payload-2")]
    assert second == [(ids[3], "payload-3"), (ids[4], "payload-4")]
    assert broker.dequeue() is None  # claimed messages stay hidden until `retry` passes


def test_dequeue__is_one_statement_with_skip_locked(broker):
    enqueue(broker, 1)

    with CaptureQueriesContext(connection) as captured:
        broker.dequeue()

    statements = [q["sql"] for q in captured.captured_queries]
    assert len(statements) == 1, statements
    assert "FOR UPDATE SKIP LOCKED" in statements[0]
    assert "ORDER BY id" in statements[0]


def test_dequeue__only_its_own_queue(broker):
    other = SkipLockedOrmBroker(list_key="elsewhere")
    enqueue(other, 2)
    ids = enqueue(broker, 1)

    assert broker.dequeue() == [(ids[0], "payload-0")]
    assert len(other.dequeue()) == 2


def test_acknowledge__deletes_the_message(broker):
    ids = enqueue(broker, 2)
    broker.dequeue()

    broker.acknowledge(ids[0])

    assert list(OrmQ.objects.values_list("id", flat=True)) == [ids[1]]


def test_acknowledge__is_one_delete(broker):
    ids = enqueue(broker, 1)
    broker.dequeue()

    with CaptureQueriesContext(connection) as captured:
        broker.acknowledge(ids[0])

    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["DELETE"]


def test_unacknowledged_message__is_delivered_again_after_retry(broker, monkeypatch):
    monkeypatch.setattr(Conf, "RETRY", 0.2)
    ids = enqueue(broker, 1)
    assert broker.dequeue() == [(ids[0], "payload-0")]
    assert broker.dequeue() is None

    time.sleep(0.3)

    assert broker.dequeue() == [(ids[0], "payload-0")]
    broker.acknowledge(ids[0])
    time.sleep(0.3)
    assert broker.dequeue() is None


def test_enqueue__leaves_the_callers_connection_alone(monkeypatch):
    # django-q2 builds a broker for every message; the ORM broker then closes stale connections,
    # which with health checks on costs the caller a ping before its next query.
    caller = connections["default"]
    caller.ensure_connection()
    monkeypatch.setattr(caller, "health_check_enabled", True)
    monkeypatch.setattr(caller, "health_check_done", True)
    pings = []
    is_usable = caller.is_usable
    monkeypatch.setattr(caller, "is_usable", lambda: pings.append(1) or is_usable())

    SkipLockedOrmBroker().enqueue("payload")

    assert pings == []
    assert OrmQ.objects.filter(payload="payload").exists()


def listening_backends() -> set[int]:
    """Backends of this database (other than ours) whose last statement was the broker's
    LISTEN: idle pushers."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE query = %s AND pid <> pg_backend_pid() "
            "AND datname = current_database()",
            [f'LISTEN "{WAKE_CHANNEL}"'],
        )
        return {pid for (pid,) in cursor.fetchall()}


def idle_pusher(pusher: SkipLockedOrmBroker, dequeued: list) -> tuple[threading.Thread, int]:
    """A thread that dequeues twice (the first time from an empty queue), and its backend's pid
    once it LISTENs."""
    already = listening_backends()

    def pull_twice() -> None:
        try:
            dequeued.append(pusher.dequeue())
            dequeued.append(pusher.dequeue())
        finally:
            connections.close_all()

    thread = threading.Thread(target=pull_twice, daemon=True)
    thread.start()
    deadline = time.monotonic() + JOIN_SECONDS
    while not (new := listening_backends() - already):
        assert time.monotonic() < deadline, "the idle pusher never LISTENed"
        time.sleep(0.01)
    (pid,) = new
    return thread, pid


def test_idle_dequeue__a_sent_message_ends_the_wait(monkeypatch):
    # A poll no test would wait out: only the message's notification can end it in time.
    monkeypatch.setattr(Conf, "POLL", 600)
    dequeued: list = []
    thread, _ = idle_pusher(SkipLockedOrmBroker(list_key="wake-q"), dequeued)

    sent = SkipLockedOrmBroker(list_key="wake-q").enqueue("wake up")
    thread.join(JOIN_SECONDS)

    assert not thread.is_alive(), "the pusher slept through the message"
    assert dequeued == [None, [(sent, "wake up")]]


def test_idle_dequeue__a_connection_lost_while_waiting_is_replaced(monkeypatch):
    monkeypatch.setattr(Conf, "POLL", 1)
    dequeued: list = []
    thread, pid = idle_pusher(SkipLockedOrmBroker(list_key="wake-q"), dequeued)

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    sent = SkipLockedOrmBroker(list_key="wake-q").enqueue("still here")
    thread.join(JOIN_SECONDS)

    assert not thread.is_alive()
    assert dequeued == [None, [(sent, "still here")]]
