"""Concurrent dequeuers on `SkipLockedOrmBroker` (each thread its own connection) never receive
the same message, and together they receive every message."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django_q.conf import Conf

from pikku_workflows.broker import SkipLockedOrmBroker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MESSAGES = 120
DEQUEUERS = 4
JOIN_TIMEOUT = 30


def test_concurrent_dequeuers__never_share_a_message(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(Conf, "BULK", 5)
    monkeypatch.setattr(Conf, "POLL", 0)
    broker = SkipLockedOrmBroker(list_key="race-q")
    ids = [broker.enqueue(f"m{i}") for i in range(MESSAGES)]
    barrier = threading.Barrier(DEQUEUERS, timeout=JOIN_TIMEOUT)
    received: list[list[int]] = [[] for _ in range(DEQUEUERS)]
    errors: list[BaseException] = []

    def dequeuer(index: int) -> None:
        try:
            mine = SkipLockedOrmBroker(list_key="race-q")
            barrier.wait()
            while batch := mine.dequeue():
                ids_in_batch = [task_id for task_id, _ in batch]
                assert ids_in_batch == sorted(ids_in_batch)  # each batch oldest first
                received[index].extend(ids_in_batch)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=dequeuer, args=(i,), daemon=True) for i in range(DEQUEUERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a dequeuer hung"
    assert errors == []
    everything = [task_id for batch in received for task_id in batch]
    assert sorted(everything) == sorted(ids)  # all delivered, none twice
    assert len(set(everything)) == MESSAGES
