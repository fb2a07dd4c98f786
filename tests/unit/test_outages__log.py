"""The outage log: one WARNING when failures begin, a count while they go on, one line once
none happened for two recovery intervals; a traceback only for an error new in the outage; one
outage for all the processes a worker forks."""

from __future__ import annotations

import logging
import multiprocessing

import pytest
from django.db import OperationalError

from pikku_workflows.exceptions import WorkflowDispatchException
from pikku_workflows.outages import REMIND_SECONDS, OutageLog, quiet_seconds

DOWN = OperationalError('connection failed: FATAL: database "shop" is not accepting connections')


class Clock:
    now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.WARNING, logger="pikku_workflows.outages")
    return lambda: [r for r in caplog.records if r.name == "pikku_workflows.outages"]


def test_outage__a_thousand_failures_are_one_line_with_the_error_and_no_traceback(clock, lines):
    log = OutageLog(clock)

    for attempt in range(1000):
        clock.now += 0.01
        log.failed("the timer loop" if attempt % 2 else "renewing leases", DOWN)

    (began,) = lines()
    assert began.levelno == logging.WARNING and began.exc_info is None
    assert began.getMessage().startswith(
        "pikku_workflows: outage: renewing leases: OperationalError: connection failed: FATAL: "
        'database "shop" is not accepting connections. Retrying'
    )


def test_outage__a_count_every_remind_seconds_while_it_lasts(clock, lines):
    log = OutageLog(clock)
    for _ in range(2 * REMIND_SECONDS + 1):
        log.failed("the timer loop", DOWN)
        clock.now += 1

    counts = [r.getMessage() for r in lines()[1:]]
    assert counts == [
        "pikku_workflows: outage goes on: 31 failures in 30 s; the latest: the timer loop: "
        'OperationalError: connection failed: FATAL: database "shop" is not accepting connections',
        "pikku_workflows: outage goes on: 61 failures in 60 s; the latest: the timer loop: "
        'OperationalError: connection failed: FATAL: database "shop" is not accepting connections',
    ]


def test_outage__ends_with_one_line_once_nothing_failed_for_two_recovery_intervals(clock, lines):
    log = OutageLog(clock)
    for _ in range(49):
        log.failed("the timer loop", DOWN)
        clock.now += 0.2
    log.failed("the timer loop", DOWN)

    clock.now += quiet_seconds() - 0.1
    log.check()
    assert len(lines()) == 1
    clock.now += 0.1
    log.check()
    log.check()

    _, over = lines()
    assert over.getMessage() == (
        "pikku_workflows: outage over: 50 failures in 9.8 s, none since; it began with the timer "
        'loop: OperationalError: connection failed: FATAL: database "shop" is not accepting '
        "connections"
    )


def test_outage__a_failure_long_after_the_last_one_is_a_new_outage(clock, lines):
    log = OutageLog(clock)
    log.failed("the timer loop", DOWN)
    clock.now += quiet_seconds() + 1  # nobody called check()

    log.failed("relaying step 'charge'", WorkflowDispatchException("queue refused"))

    messages = [r.getMessage() for r in lines()]
    assert [m.split(":")[1] for m in messages] == [" outage", " outage over", " outage"]
    assert "queue refused" in messages[2]


def test_outage__a_new_kind_of_error_gets_its_traceback_once(clock, lines):
    log = OutageLog(clock)
    log.failed("the timer loop", DOWN)

    for _ in range(3):
        try:
            raise KeyError("missing column")
        except KeyError as exc:
            log.failed("the timer loop", exc)

    _, new = lines()
    assert (
        new.getMessage()
        == "pikku_workflows: outage: also the timer loop: KeyError: 'missing column'"
    )
    assert new.exc_info is not None and new.exc_info[0] is KeyError


def test_outage__an_unexpected_error_that_begins_it_carries_its_traceback(clock, lines):
    try:
        raise RuntimeError("bug")
    except RuntimeError as exc:
        OutageLog(clock).failed("the timer loop", exc)

    (began,) = lines()
    assert began.exc_info is not None and began.exc_info[0] is RuntimeError


def _fail_in_child(log: OutageLog) -> None:
    log.failed("taking messages from the queue", DOWN)


def test_outage__the_processes_a_worker_forks_share_one_outage(clock, lines):
    log = OutageLog(clock)
    log.share_across_forks()
    child = multiprocessing.get_context("fork").Process(target=_fail_in_child, args=(log,))
    child.start()
    child.join(10)
    assert child.exitcode == 0

    log.failed("the timer loop", DOWN)  # the outage the child began: counted, not begun again
    clock.now += quiet_seconds()
    log.check()

    (over,) = lines()
    assert over.getMessage().startswith("pikku_workflows: outage over: 2 failures in 0.0 s")
    assert "it began with taking messages from the queue" in over.getMessage()
