"""A start with an idempotency key racing the purge of the run that key names: whatever the
purge commits between the start's first reads and its insert, the key answers with the purged
run's id and never starts a second run."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowRunTombstone
from tests.faults import backend_pid, is_waiting_on_a_lock
from tests.retention import age, ended_order, register_shop

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RUNS = WorkflowRun._meta.db_table
KEY = "order-7"
WAIT_SECONDS = 10


class PurgeBehindTheRunTable:
    """A purge on its own connection that first takes the run table (ACCESS EXCLUSIVE), so a
    start reading runs waits, and purges and commits once `release()` is called: its commit
    lands between the start's read of the tombstones and its read of the runs."""

    def __init__(self) -> None:
        self._taken = threading.Event()
        self._release = threading.Event()
        self.outcome: Any = None
        self._thread = threading.Thread(target=self._purge, daemon=True)

    def __enter__(self) -> PurgeBehindTheRunTable:
        self._thread.start()
        assert self._taken.wait(WAIT_SECONDS), f"could not take the run table: {self.outcome!r}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        self._release.set()
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the purge hung"

    def _purge(self) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {RUNS} IN ACCESS EXCLUSIVE MODE")
                self._taken.set()
                self._release.wait(WAIT_SECONDS)
                self.outcome = pw.purge_runs(older_than="30d")
        except BaseException as exc:
            self.outcome = exc
            self._taken.set()
        finally:
            connection.close()


class StartElsewhere:
    """`pw.start_workflow` of the keyed order on its own connection; `pid` its backend."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.outcome: Any = None
        self._thread = threading.Thread(target=self._start, daemon=True)

    def _start(self) -> None:
        try:
            self.pid = backend_pid()
            self.outcome = pw.start_workflow("retention.order", {"n": 7}, idempotency_key=KEY)
        except BaseException as exc:
            self.outcome = exc
        finally:
            connection.close()

    def start(self) -> None:
        self._thread.start()

    def wait_until_blocked(self) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while self.pid is None or not is_waiting_on_a_lock(self.pid):
            assert time.monotonic() < deadline, "the start never reached the run table"
            assert self._thread.is_alive(), f"the start ended unblocked: {self.outcome!r}"
            time.sleep(0.01)

    def join(self) -> Any:
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the start hung"
        return self.outcome


def test_start__a_purge_committing_between_its_reads_answers_the_purged_run():
    register_shop()
    run_id = ended_order(7, idempotency_key=KEY)
    age(run_id, days=40)

    with PurgeBehindTheRunTable() as purge:
        start = StartElsewhere()
        start.start()
        start.wait_until_blocked()  # past the tombstones (none yet), waiting on the runs
        purge.release()
    answered = start.join()

    assert not isinstance(purge.outcome, BaseException), purge.outcome
    assert purge.outcome["runs"] == 2  # the order and its invoice
    assert answered == run_id
    assert WorkflowRunTombstone.objects.filter(pk=run_id, idempotency_key=KEY).exists()
    assert not WorkflowRun.objects.filter(idempotency_key=KEY).exists()
