"""Run django-q2's queued tasks in the test process: what a worker cluster would do, in order."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage

DRAIN_LIMIT = 500

Task = tuple[str, tuple[Any, ...]]


def queued_tasks() -> list[Task]:
    """(dotted task, args) of every message waiting in the ORM queue, oldest first."""
    tasks = []
    for payload in OrmQ.objects.order_by("id").values_list("payload", flat=True):
        task = SignedPackage.loads(payload)
        tasks.append((task["func"], tuple(task["args"])))
    return tasks


def drain_queue(limit: int = DRAIN_LIMIT) -> list[Task]:
    """Execute queued tasks (and the tasks they enqueue) until the queue is empty; return them.

    Each message is acknowledged before its task runs (django-q2 with `ack_failures=True`); a
    task's exception propagates so the test sees it. More than `limit` tasks means something
    keeps re-enqueueing itself: fail rather than loop forever.
    """
    ran: list[Task] = []
    while True:
        # Messages another consumer holds (a lock in the future) are not ours to run.
        key = OrmQ.objects.filter(lock__lte=timezone.now()).values_list("key", flat=True).first()
        if key is None:
            return ran
        broker = get_broker(key)
        for task_id, payload in broker.dequeue() or []:
            task = SignedPackage.loads(payload)
            broker.acknowledge(task_id)
            ran.append((task["func"], tuple(task["args"])))
            assert len(ran) <= limit, f"the queue did not drain after {limit} tasks: {ran[-5:]}"
            func = import_string(task["func"]) if isinstance(task["func"], str) else task["func"]
            func(*task["args"], **task.get("kwargs", {}))
