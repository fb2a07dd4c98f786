"""Racing threads against one database state: released together, each with its own connection;
and one action on another connection, waited for."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

JOIN_TIMEOUT = 30


def race(actions: list[Callable[[Any], Any]], prepare: Callable[[], Any] = lambda: None) -> list:
    """Run each action in its own thread, released together by a barrier; return each outcome
    (the action's return value, or the exception it raised).

    `prepare` runs in each thread before the barrier (so each thread reads its own copy of a row
    first) and its value is the action's argument. A hung thread fails the test (deadlock?).
    """
    barrier = threading.Barrier(len(actions), timeout=JOIN_TIMEOUT)
    outcomes: list[Any] = [None] * len(actions)

    def contender(index: int, action: Callable[[Any], Any]) -> None:
        try:
            prepared = prepare()
            barrier.wait()
            outcomes[index] = action(prepared)
        except BaseException as exc:  # report everything, including a broken barrier
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=contender, args=(index, action), daemon=True)
        for index, action in enumerate(actions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a contender hung (deadlock?)"
    return outcomes


def elsewhere(action: Callable[[], Any]) -> Any:
    """`action()` on another connection (another process, as far as the database can tell),
    waited for; what it returned, or what it raised raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connection.close()

    other = threading.Thread(target=run, daemon=True)
    other.start()
    other.join(JOIN_TIMEOUT)
    assert outcome, "the other connection hung"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]
