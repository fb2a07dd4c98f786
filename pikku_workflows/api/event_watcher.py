"""The process's one watcher of the runs that open event streams follow: a thread that, once per
tick, asks the database in one query which of those runs changed (`changed_runs`) and wakes the
streams of those runs only. Streams hold no database connection while they wait; the watcher
holds one while it has runs to watch, and closes it when it has none (docs/http-api.md).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, connections

from .engine_internals import RunMark, changed_runs

logger = logging.getLogger(__name__)

# How often the watcher asks which runs changed: the most a change waits for its stream.
TICK_SECONDS = 0.5


@dataclass(eq=False)
class Watch:
    """One stream's interest in a run; `wake` is called from the watcher's thread."""

    run_id: uuid.UUID
    wake: Callable[[], None] = field(repr=False)


class RunWatcher:
    """Started by the first watch of its process (a forked child starts its own)."""

    def __init__(self) -> None:
        self._changes = threading.Condition()
        self._watches: dict[uuid.UUID, set[Watch]] = {}
        self._marks: dict[uuid.UUID, RunMark] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._failing = False

    def watch(self, run_id: uuid.UUID, mark: RunMark, wake: Callable[[], None]) -> Watch:
        """Wake `wake` whenever the run changes from `mark`, the mark its stream last read."""
        watch = Watch(run_id, wake)
        with self._changes:
            idle = not self._watches
            watches = self._watches.setdefault(run_id, set())
            if not watches:
                self._marks[run_id] = mark
            elif self._marks[run_id] != mark:
                # The stream read another state than the watcher last saw: it reads again.
                wake()
            watches.add(watch)
            self._ensure_running()
            if idle:
                self._changes.notify()
        return watch

    def unwatch(self, watch: Watch) -> None:
        with self._changes:
            watches = self._watches.get(watch.run_id, set())
            watches.discard(watch)
            if not watches:
                self._watches.pop(watch.run_id, None)
                self._marks.pop(watch.run_id, None)

    def watched(self) -> int:
        """How many runs the watcher follows now."""
        with self._changes:
            return len(self._watches)

    def _ensure_running(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="pikku-event-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changes:
                while not self._watches:
                    connections.close_all()  # nothing to watch: hold no connection either
                    self._changes.wait()
                since = dict(self._marks)
            try:
                self._wake_changed(since)
            except Exception:
                # A bug here must not stop every stream of the process: they still resync.
                logger.exception("pikku_workflows: the event stream watcher failed a tick")
            with self._changes:
                self._changes.wait(TICK_SECONDS)

    def _wake_changed(self, since: dict[uuid.UUID, RunMark]) -> None:
        try:
            changed = changed_runs(since)
        except DatabaseError as exc:
            if not self._failing:
                logger.warning("pikku_workflows: event streams cannot read run changes: %s", exc)
            self._failing = True
            connections.close_all()  # a broken connection is replaced at the next tick
            return
        if self._failing:
            logger.warning("pikku_workflows: event streams read run changes again")
            self._failing = False
        with self._changes:
            woken: list[Watch] = []
            for run_id, mark in changed.items():
                if run_id in self._watches:
                    self._marks[run_id] = mark
                    woken += self._watches[run_id]
        for watch in woken:
            watch.wake()


watcher = RunWatcher()
