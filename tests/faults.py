"""Faults injected at the real boundaries: statements the database refuses or slows (triggers), row
locks held from another connection, a skewed application clock, and the database's own clock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, connections, transaction

from pikku_workflows.models import WorkflowRun

QUEUE_TABLE = "django_q_ormq"


@contextlib.contextmanager
def refused(
    table: str,
    *,
    on: str = "INSERT",
    when: str = "true",
    errcode: str = "P0001",
    message: str = "injected fault",
) -> Iterator[None]:
    """While inside, the database refuses every `on` statement's row of `table` for which the
    SQL condition `when` (over NEW) holds, with SQLSTATE `errcode` (a BEFORE trigger).

    The trigger is committed at once, so every connection sees it: a queue outage, a revoked
    permission, a lock or statement timeout, as the engine's own statements would meet them.
    """
    name = f"pikku_fault_{table}_{on.lower()}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {when} THEN
                    RAISE EXCEPTION '{message}' USING ERRCODE = '{errcode}';
                END IF;
                RETURN NEW;
            END $$"""
        )
        cursor.execute(
            f"CREATE TRIGGER {name} BEFORE {on} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")


@contextlib.contextmanager
def slowed(table: str, *, seconds: float, on: str = "INSERT", when: str = "true") -> Iterator[None]:
    """While inside, every `on` statement's row of `table` for which the SQL condition `when`
    (over NEW, or OLD for a DELETE) holds sleeps `seconds` first (a BEFORE trigger, committed at once): the writing
    transaction stays open that long, waiting as `PgSleep` in pg_stat_activity
    (`sleeping_backends`), so a test can kill its process right inside it."""
    name = f"pikku_slow_{table}_{on.lower()}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {when} THEN
                    PERFORM pg_sleep({float(seconds)});
                END IF;
                IF TG_OP = 'DELETE' THEN
                    RETURN OLD;
                END IF;
                RETURN NEW;
            END $$"""
        )
        cursor.execute(
            f"CREATE TRIGGER {name} BEFORE {on} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")


def sleeping_backends() -> int:
    """How many other connections to this database wait in `pg_sleep` (a `slowed` statement)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def busy_backends(statement: str = "") -> list[int]:
    """The other connections to this database running a statement that starts with `statement`
    (any, by default): a killed client's backend is among them until it notices and rolls back."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
            "AND state <> 'idle' AND query LIKE %s",
            [f"{statement}%"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def dead_lease(run_id: Any) -> None:
    """The run's lease as a worker left it when it died mid-pass: held, and lapsed."""
    WorkflowRun.objects.filter(pk=run_id).update(
        lease_holder="a-worker-that-died",
        lease_expires_at=database_now() - timedelta(seconds=1),
    )


class HeldRowLock:
    """A transaction on its own connection (a thread) that updates a row and holds the lock until
    `release()`: what a concurrent cancel looks like between its UPDATE and its COMMIT."""

    def __init__(self, sql: str, params: list[Any]) -> None:
        self._sql, self._params = sql, params
        self._taken = threading.Event()
        self._release = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> HeldRowLock:
        self._thread.start()
        assert self._taken.wait(10), f"could not take the lock: {self.error!r}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        self._release.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the lock holder hung"

    def _hold(self) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(self._sql, self._params)
                self._taken.set()
                self._release.wait(30)
        except BaseException as exc:
            self.error = exc
            self._taken.set()
        finally:
            connection.close()


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def is_waiting_on_a_lock(pid: int) -> bool:
    """True while the backend `pid` waits for a row lock another transaction holds."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"
