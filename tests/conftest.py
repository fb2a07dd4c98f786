"""Shared fixtures: a registry restored after each test, users, and the database vendor; the
run's time per test directory, printed at its end."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from pikku_workflows.registry import registry
from tests.shop import Shop
from tests.trips import register_trips


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Poll `condition` until it returns something truthy (returned); fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


# Tests that take seconds each. Spread evenly through the run: pytest-xdist hands each worker a
# contiguous share of the tests first, so in one block they would all go to one worker (or all
# start together, each with its own worker subprocesses, on a machine of two cores).
LONG_MARKERS = ("e2e", "browser", "fuzz", "slow")


def spread_long_tests(items: list[pytest.Item]) -> list[pytest.Item]:
    long = [item for item in items if any(marker in item.keywords for marker in LONG_MARKERS)]
    if not long:
        return items
    long_ids = {id(item) for item in long}
    short = [item for item in items if id(item) not in long_ids]
    share = len(short) / len(long)
    spread: list[pytest.Item] = []
    for index, item in enumerate(long):
        spread.append(item)
        spread += short[round(index * share) : round((index + 1) * share)]
    return spread


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = spread_long_tests(items)
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (running on the SQLite fallback)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Seconds spent per top-level test directory (setup, call and teardown summed; with xdist
    the workers' reports reach the controller, so the sums add up every worker's time)."""
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", None)
            if not nodeid.startswith("tests/") or duration is None:
                continue
            directory = nodeid.split("/")[1] if nodeid.count("/") > 1 else "tests"
            seconds[directory] = seconds.get(directory, 0.0) + duration
            if getattr(report, "when", None) == "call" or report.skipped:
                counts[directory] = counts.get(directory, 0) + 1
    if not seconds:
        return
    terminalreporter.write_sep("=", "time per test directory (summed over workers)")
    for directory, total in sorted(seconds.items(), key=lambda item: -item[1]):
        tests = counts.get(directory, 0)
        terminalreporter.write_line(f"{total:8.1f} s  {directory:<12} {tests:5d} tests")


@pytest.fixture(autouse=True)
def isolated_registry() -> Iterator[None]:
    """Workflows a test registers disappear after it; the autodiscovered ones stay."""
    workflows = dict(registry.workflows)
    step_functions = dict(registry.step_functions)
    limits = dict(registry.limits)
    schedule_owners = dict(registry.schedule_owners)
    yield
    registry.limits.clear()
    registry.limits.update(limits)
    registry.workflows.clear()
    registry.workflows.update(workflows)
    registry.step_functions.clear()
    registry.step_functions.update(step_functions)
    registry.schedule_owners.clear()
    registry.schedule_owners.update(schedule_owners)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Users get passwords (admin logins, basic auth over real HTTP); the default hasher takes
    up to a second for each hash, and an admin test hashes twice (create, log in)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def shop() -> Shop:
    """The test shop (tests/shop.py), registered as `admin_tests.*`."""
    state = Shop()
    state.register()
    return state


@pytest.fixture
def trip() -> dict:
    """The trip workflow of tests/trips.py, each booking undone by a compensation; its log."""
    return register_trips()


@pytest.fixture
def through_the_queue(settings: Any) -> None:
    """Queued steps go through the queue even when a pass on a worker reaches them (no running
    in place): for tests of the dispatch path itself."""
    settings.PIKKU_WORKFLOWS = {**getattr(settings, "PIKKU_WORKFLOWS", {}), "IN_PLACE": False}


@pytest.fixture
def fresh_backoff(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A recovery backoff that remembers nothing (the module's one is shared by every test)."""
    from pikku_workflows.engine.operations import recovery

    backoff = recovery.RedispatchBackoff()
    monkeypatch.setattr(recovery, "backoff", backoff)
    return backoff


@pytest.fixture
def outage_log(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    """The outage log (pikku_workflows/outages.py) with nothing remembered, its clock a float
    a test moves on (`outage_log.now += 30`); its WARNING lines as `outage_log.lines()`."""
    from pikku_workflows.outages import OutageLog, outages

    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

        def lines(self) -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "pikku_workflows.outages"]

    clock = Clock()
    for name, value in vars(OutageLog(clock)).items():
        monkeypatch.setattr(outages, name, value)
    caplog.set_level(logging.WARNING, logger="pikku_workflows.outages")
    return clock


@pytest.fixture
def skewed_clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`skewed_clock(seconds)`: from now on this process's clock (Django's `timezone.now`) runs
    `seconds` ahead of the database's (behind when negative), as on a machine whose NTP broke."""

    real_now = timezone.now

    def skew(seconds: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))

    return skew


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """A transactional test's database is emptied with DELETE, not Django's TRUNCATE, and on
    either database the run counts' tables are emptied last: the run table's DELETE trigger
    writes them, so emptied before it they would keep its deletes as negative counts.

    On PostgreSQL TRUNCATE gives every table and index a new file and fsyncs each rebuilt index
    (some 80 per flush), which took most of a second after every transactional test on a busy
    disk; a DELETE of the few rows a test left is one commit. Every foreign key is deferred
    (Django creates them so), so the order of the other tables does not matter. Sequence resets
    and CASCADE (which no test asks for) keep Django's TRUNCATE. SQLite's flush is DELETE already.
    """
    operations = type(connection.ops)
    flush = operations.sql_flush

    def sql_flush(
        self: Any,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        from pikku_workflows.models import WorkflowRunCount, WorkflowRunCountChange

        written_by_triggers = {
            table._meta.db_table for table in (WorkflowRunCount, WorkflowRunCountChange)
        }
        ordered = sorted(tables, key=lambda table: table in written_by_triggers)
        if self.connection.vendor != "postgresql" or reset_sequences or allow_cascade:
            return flush(
                self, style, ordered, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        delete = style.SQL_KEYWORD("DELETE FROM")
        return [f"{delete} {style.SQL_FIELD(self.quote_name(table))};" for table in ordered]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(operations, "sql_flush", sql_flush)
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, plus: commits that do not wait for the disk, sessions
    in Django's time zone from the start, and before it is dropped, wake the lease heartbeat.

    `synchronous_commit = off` (set on the database, so worker subprocesses have it too) only
    gives up the last commits if the PostgreSQL server itself crashes, which no test does: what
    every client sees and when is unchanged, and the suite spends its time testing instead of
    waiting for a WAL fsync after each of its many small transactions.

    The heartbeat's thread keeps a connection until it next wakes holding nothing (up to a
    third of a lease); woken now it exits and closes it, so the drop does not find the database
    in use.
    """
    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            name = connection.ops.quote_name(connection.settings_dict["NAME"])
            cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
            cursor.execute("SET synchronous_commit = off")
            # Django's time zone for its sessions: a new connection needs no SET TIME ZONE.
            cursor.execute(f"ALTER DATABASE {name} SET timezone = '{connection.timezone_name}'")
    yield
    from pikku_workflows.engine.store.leases import heartbeat

    thread = heartbeat._thread
    if thread is not None and thread.is_alive():
        heartbeat._wake.set()
        thread.join(5)
        heartbeat._wake.clear()
