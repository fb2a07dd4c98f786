"""How failures of the database or the queue are logged while they last: one WARNING when they
begin (with the error), a count every REMIND_SECONDS while they go on, one line once nothing has
failed for a while; a traceback only for an error not seen before in the outage.

Every loop that retries on its own (the timer loop, the lease heartbeat, the broker's pusher and
acknowledgements, the task entry points) reports here instead of logging each failure: a 10 s
database cut wrote 248 tracebacks per worker before. `pikku_worker` shares the outage across the
processes it forks (`share_across_forks`, before its cluster starts), so each outage is logged
once per worker, not once per process.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import InterfaceError, OperationalError

from .conf import pikku_settings
from .exceptions import WorkflowDispatchException

logger = logging.getLogger("pikku_workflows.outages")

# Errors that say the database or the queue is unreachable or refusing: their traceback tells an
# operator nothing the message does not. Any other error gets its traceback once per outage.
OUTAGE_ERRORS = (OperationalError, InterfaceError, WorkflowDispatchException)
REMIND_SECONDS = 30
_TEXT_BYTES = 400
# The slots of the shared numbers: when the outage began, when it last failed, when it was
# last reported, how many failures (0 everywhere: no outage).
_BEGAN, _LAST, _REPORTED, _FAILURES = range(4)


def quiet_seconds() -> float:
    """How long nothing may fail before an outage counts as over: two recovery sweeps, each of
    which retries what the outage held up."""
    return 2 * float(pikku_settings.RECOVERY_INTERVAL_SECONDS)


def signature(error: BaseException) -> str:
    """What makes two errors the same one: their type and first line, numbers left out."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__qualname__}: {re.sub(r'[0-9]+', 'N', first_line)[:200]}"


def describe(what: str, error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{what}: {type(error).__name__}: {first_line}"[: _TEXT_BYTES - 1]


class OutageLog:
    """The outage this process (or, shared, this worker) is in, if any. `failed` for every
    failure of work that is retried anyway; `check` now and then from a loop that keeps going
    (the timer loop) to log the end of an outage once nothing failed for `quiet_seconds()`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock: Any = threading.Lock()
        self._numbers: Any = (ctypes.c_double * 4)()
        self._text: Any = ctypes.create_string_buffer(_TEXT_BYTES)
        self._seen: set[str] = set()
        self._seen_in: float = 0.0  # the outage (its start) `_seen` belongs to

    def share_across_forks(self) -> None:
        """Keep the outage in shared memory: processes forked from now on report to one log."""
        self._lock = multiprocessing.Lock()
        self._numbers = multiprocessing.Array("d", 4, lock=False)
        self._text = multiprocessing.Array("c", _TEXT_BYTES, lock=False)

    def failed(self, what: str, error: BaseException) -> None:
        """`what` (work that will be retried) failed with `error`."""
        now = self._clock()
        text = describe(what, error)
        with self._lock:
            ended = self._take_ended(now)
            began = not self._numbers[_FAILURES]
            if began:
                self._numbers[_BEGAN] = self._numbers[_REPORTED] = now
                self._text.value = text.encode(errors="replace")
            remind = now - self._numbers[_REPORTED] >= REMIND_SECONDS
            if remind:
                self._numbers[_REPORTED] = now
            self._numbers[_LAST] = now
            self._numbers[_FAILURES] += 1
            outage = (self._numbers[_BEGAN], self._numbers[_FAILURES])
        if ended is not None:
            self._log_end(*ended)
        self._report(text, error, outage, began=began, remind=remind, now=now)

    def check(self) -> None:
        """Log the end of the outage once nothing has failed for `quiet_seconds()`."""
        if not self._numbers[_FAILURES]:
            return  # no outage: the common case reads one number, without the lock
        with self._lock:
            ended = self._take_ended(self._clock())
        if ended is not None:
            self._log_end(*ended)

    def _take_ended(self, now: float) -> tuple[float, float, int, str] | None:
        """Under the lock: the outage that is over by now, reset; None when there is none."""
        failures = int(self._numbers[_FAILURES])
        last = self._numbers[_LAST]
        if not failures or now - last < quiet_seconds():
            return None
        began, first = self._numbers[_BEGAN], self._text.value.decode(errors="replace")
        for slot in range(4):
            self._numbers[slot] = 0.0
        return began, last, failures, first

    def _report(
        self,
        text: str,
        error: BaseException,
        outage: tuple[float, float],
        *,
        began: bool,
        remind: bool,
        now: float,
    ) -> None:
        started, failures = outage
        if self._seen_in != started:
            self._seen, self._seen_in = set(), started
        new = signature(error) not in self._seen
        self._seen.add(signature(error))
        details = None if isinstance(error, OUTAGE_ERRORS) else error
        if began:
            logger.warning(
                "pikku_workflows: outage: %s. Retrying; further failures are counted until "
                "none happens for %.0f s.",
                text,
                quiet_seconds(),
                exc_info=details,
            )
        elif new and details is not None:
            logger.warning("pikku_workflows: outage: also %s", text, exc_info=details)
        elif remind:
            logger.warning(
                "pikku_workflows: outage goes on: %d failures in %.0f s; the latest: %s",
                failures,
                now - started,
                text,
            )

    def _log_end(self, began: float, last: float, failures: int, first: str) -> None:
        logger.warning(
            "pikku_workflows: outage over: %d failures in %.1f s, none since; it began with %s",
            failures,
            last - began,
            first,
        )


outages = OutageLog()
