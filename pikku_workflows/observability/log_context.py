"""Which run, workflow, step and attempt the current code works for (context variables set by
the orchestrator pass and around each attempt), and the logging filter that writes them on
every record: `run_id`, `workflow`, `step_key`, `attempt` (None outside a pass or a step)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

FIELDS = ("run_id", "workflow", "step_key", "attempt")


@dataclass(frozen=True)
class LogContext:
    run_id: str | None = None
    workflow: str | None = None
    step_key: str | None = None
    attempt: int | None = None


# Frozen, so the shared default cannot be changed through it.
_current: ContextVar[LogContext] = ContextVar("pikku_log_context", default=LogContext())  # noqa: B039


def current_log_context() -> LogContext:
    return _current.get()


@contextmanager
def logging_for_run(run_id: Any, workflow: str | None) -> Iterator[None]:
    """Records emitted inside name this run (an orchestrator pass; a worker's step)."""
    token = _current.set(LogContext(run_id=str(run_id), workflow=workflow))
    try:
        yield
    finally:
        _current.reset(token)


@contextmanager
def logging_for_attempt(run_id: Any, step_key: str, attempt: int) -> Iterator[None]:
    """Records emitted inside name this attempt, and its run as the pass or worker named it."""
    outer = _current.get()
    workflow = outer.workflow if outer.run_id == str(run_id) else None
    token = _current.set(
        replace(outer, run_id=str(run_id), workflow=workflow, step_key=step_key, attempt=attempt)
    )
    try:
        yield
    finally:
        _current.reset(token)


class RunContextFilter(logging.Filter):
    """Adds `run_id`, `workflow`, `step_key` and `attempt` to each record it sees, unless the
    record carries them already (the engine's own lines pass theirs as `extra`). The app puts
    one on every handler configured at startup; add it to handlers you configure later."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _current.get()
        for field in FIELDS:
            if not hasattr(record, field):
                setattr(record, field, getattr(context, field))
        return True


def install_run_context_filter() -> None:
    """Put a RunContextFilter on every handler configured so far (the root logger's and every
    named logger's), once each."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if not any(isinstance(existing, RunContextFilter) for existing in handler.filters):
                handler.addFilter(RunContextFilter())
