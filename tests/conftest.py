"""Shared fixtures: a registry restored after each test, users, and the database vendor."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from pikku_workflows.registry import registry
from tests.shop import Shop


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Seconds spent per test directory (setup, call and teardown summed), so a slow corner of
    the suite shows before it makes `make test` slow; under xdist, summed over its workers."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            if nodeid.startswith("tests/") and hasattr(report, "duration"):
                directory = nodeid.split("/")[1] if nodeid.count("/") > 1 else "tests"
                seconds[directory] = seconds.get(directory, 0.0) + report.duration
    if seconds:
        terminalreporter.section("seconds per test directory")
        for directory, total in sorted(seconds.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{total:8.1f} s  tests/{directory}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (running on the SQLite fallback)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_registry() -> Iterator[None]:
    """Workflows a test registers disappear after it; the autodiscovered ones stay."""
    workflows = dict(registry.workflows)
    step_functions = dict(registry.step_functions)
    yield
    registry.workflows.clear()
    registry.workflows.update(workflows)
    registry.step_functions.clear()
    registry.step_functions.update(step_functions)


@pytest.fixture
def shop() -> Shop:
    """The test shop's workflow and step functions, registered (tests/shop.py)."""
    state = Shop()
    state.register()
    return state


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
def skewed_clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`skewed_clock(seconds)`: from now on this process's clock (Django's `timezone.now`) runs
    `seconds` ahead of the database's (behind when negative), as on a machine whose NTP broke."""

    real_now = timezone.now

    def skew(seconds: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))

    return skew


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's test database, plus: before it is dropped, wake the lease heartbeat.

    Its thread keeps a connection until it next wakes holding nothing (up to a third of a
    lease); woken now it exits and closes it, so the drop does not find the database in use.
    """
    yield
    from pikku_workflows.engine.store.leases import heartbeat

    thread = heartbeat._thread
    if thread is not None and thread.is_alive():
        heartbeat._wake.set()
        thread.join(5)
        heartbeat._wake.clear()
