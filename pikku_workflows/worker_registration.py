"""The running `pikku_worker` processes, as the database knows them: each registers a
`WorkflowWorker` row, its timer loop refreshes it, and a clean stop removes it. The admin's
Workers page, its "no timer loop" banner and a system check read them.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.db.models import BooleanField, ExpressionWrapper, Max, Q, QuerySet

from .conf import pikku_settings
from .models import WorkflowWorker
from .querysets import DatabaseNow, database_ago

# No timer loop seen for this long: sleeps, retries and recovery are waiting for one.
SILENT_AFTER_SECONDS = 60
# A worker that missed this many heartbeats in a row is "not seen": killed, hung or cut off.
MISSED_HEARTBEATS = 3
# A worker not seen for this long was killed long ago: its row is dropped.
FORGET_AFTER = timedelta(days=1)


# The pikku_worker this process belongs to (`host:pid`), set before its cluster forks.
_worker_name: str | None = None


@functools.cache
def _host() -> str:
    return socket.gethostname()[:255]


def this_process() -> str:
    """How the attempt history names the process running an attempt: the `pikku_worker` it
    belongs to, as that worker's row names it (its forked django-q2 processes say the same), or
    else this process itself, `host:pid`."""
    return _worker_name or f"{_host()}:{os.getpid()}"


def name_worker_processes() -> None:
    """From now on this process and the ones it forks name themselves after this pikku_worker."""
    global _worker_name
    _worker_name = f"{_host()}:{os.getpid()}"


class WorkerRegistration:
    """This process's `WorkflowWorker` row, from `register()` to `unregister()`, refreshed every
    `WORKER_HEARTBEAT_SECONDS`."""

    def __init__(self, cluster: str, steps_in_flight: Callable[[], int] = lambda: 0) -> None:
        self.cluster = cluster
        self.steps_in_flight = steps_in_flight
        self.pk: Any = None
        self._next_beat = 0.0

    def register(self) -> None:
        forgotten = database_ago(FORGET_AFTER.total_seconds())
        WorkflowWorker.objects.filter(last_seen_at__lt=forgotten).delete()
        worker = WorkflowWorker.objects.create(
            host=_host(),
            pid=os.getpid(),
            cluster=self.cluster,
            started_at=DatabaseNow(),
            last_seen_at=DatabaseNow(),
        )
        self.pk = worker.pk
        self._next_beat = time.monotonic() + pikku_settings.WORKER_HEARTBEAT_SECONDS

    def beat(self) -> None:
        """Refresh the row (called on every timer loop tick; writes once per heartbeat)."""
        if time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + pikku_settings.WORKER_HEARTBEAT_SECONDS
        seen = {"last_seen_at": DatabaseNow(), "steps_in_flight": self.steps_in_flight()}
        if self.pk is None or not WorkflowWorker.objects.filter(pk=self.pk).update(**seen):
            self.register()  # never registered (the database was down) or pruned meanwhile

    def unregister(self) -> None:
        if self.pk is not None:
            WorkflowWorker.objects.filter(pk=self.pk).delete()
            self.pk = None


def timer_loop_seen(within_seconds: float = SILENT_AFTER_SECONDS) -> bool:
    """Whether some worker's timer loop was seen in the last `within_seconds` (database clock)."""
    return WorkflowWorker.objects.filter(last_seen_at__gte=database_ago(within_seconds)).exists()


def last_seen() -> Any:
    """When a timer loop was last seen (None: never, or so long ago it was forgotten)."""
    return WorkflowWorker.objects.aggregate(at=Max("last_seen_at"))["at"]


def worker_silent_after() -> float:
    """Seconds without a heartbeat after which a worker is not seen (MISSED_HEARTBEATS)."""
    return MISSED_HEARTBEATS * pikku_settings.WORKER_HEARTBEAT_SECONDS


def with_silence(workers: QuerySet[WorkflowWorker]) -> QuerySet[WorkflowWorker]:
    """`workers` annotated with `silent`: whether they missed MISSED_HEARTBEATS heartbeats, by
    the database clock."""
    missed = Q(last_seen_at__lt=database_ago(worker_silent_after()))
    return workers.annotate(silent=ExpressionWrapper(missed, output_field=BooleanField()))


def workers_named(names: Iterable[str]) -> dict[str, WorkflowWorker]:
    """The registered workers among `names` (`host:pid`, as `this_process` names them), by name,
    annotated with `silent`. One query."""
    wanted = {name.rpartition(":")[::2] for name in names if ":" in name}
    if not wanted:
        return {}
    match = Q(pk__in=[])
    for host, pid in wanted:
        if pid.isdigit():
            match |= Q(host=host, pid=int(pid))
    return {f"{w.host}:{w.pid}": w for w in with_silence(WorkflowWorker.objects.filter(match))}
