"""A workflow's concurrency rule (`pw.Concurrency`), checked when it is declared, and the key it
gives a run's input, checked before the run is written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import TextChoices

from ..exceptions import InvalidInput
from ..validation import KEY_MAX_LENGTH, checked_text

# Far more slots than one key should ever hold: a larger number is almost surely a slip.
MAX_ACTIVE_LIMIT = 100_000


class OnFull(TextChoices):
    """What a start does when its key already has `max_active` admitted runs."""

    QUEUE = "queue", "Wait queued"
    SKIP = "skip", "Skip (cancel the new run)"
    REPLACE = "replace", "Replace (cancel the oldest active run)"


KeyFunction = Callable[[Any], Any]


@dataclass(frozen=True)
class Concurrency:
    """At most `max_active` runs of the workflow with the same `key` are admitted (from
    admission until they end; a parked run keeps its place). `key` is a string (one key for
    every run) or `f(input) -> str`."""

    key: str | KeyFunction
    max_active: int = 1
    on_full: str = OnFull.QUEUE

    def __post_init__(self) -> None:
        if not callable(self.key):
            checked_text(self.key, "Concurrency key", max_length=KEY_MAX_LENGTH)
        limit = self.max_active
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_ACTIVE_LIMIT
        ):
            raise InvalidInput(
                f"Concurrency max_active must be a whole number from 1 to {MAX_ACTIVE_LIMIT}, "
                f"not {limit!r}."
            )
        if self.on_full not in OnFull.values:
            raise InvalidInput(
                f"Concurrency on_full must be one of {', '.join(OnFull.values)}, "
                f"not {self.on_full!r}."
            )


def run_concurrency_key(rule: Concurrency, workflow: str, input: Any) -> str:
    """The key `rule` gives a run of `workflow` started with `input`; InvalidInput when the key
    function raises or returns anything but a non-empty string that fits its column."""
    return key_of(rule.key, "concurrency", workflow, input)


def key_of(key: str | KeyFunction, rule: str, workflow: str, input: Any) -> str:
    """The key a `rule` ("concurrency", "debounce") declared as `key` gives `input`, checked."""
    if not callable(key):
        return key
    try:
        value = key(input)
    except Exception as exc:
        raise InvalidInput(
            f"The {rule} key function of {workflow!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    return checked_text(value, f"The {rule} key of {workflow!r}", max_length=KEY_MAX_LENGTH)


# How far (seconds) a queued run's priority moves it ahead of (or behind) its start time.
MAX_PRIORITY = 3600
Priority = int | Callable[[Any], Any]


def checked_priority(priority: object, workflow: str) -> Priority:
    """A workflow's `priority=`: whole seconds in -3600..3600, or `f(input)` returning them."""
    if callable(priority):
        return priority
    return _priority_seconds(priority, f"Workflow {workflow!r}: priority")


def run_priority(priority: Priority, workflow: str, input: Any) -> int:
    """The priority a new run of `workflow` gets; InvalidInput when a priority function raises
    or returns anything but whole seconds in range."""
    if not callable(priority):
        return priority
    try:
        seconds = priority(input)
    except Exception as exc:
        raise InvalidInput(
            f"The priority function of {workflow!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    return _priority_seconds(seconds, f"The priority of {workflow!r}")


def _priority_seconds(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_PRIORITY:
        raise InvalidInput(
            f"{what} must be whole seconds from -{MAX_PRIORITY} to {MAX_PRIORITY}, not {value!r}."
        )
    return value
