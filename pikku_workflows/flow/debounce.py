"""A workflow's debounce rule (`pw.Debounce`), checked when it is declared, and the key it gives a
start's input, checked before anything is written (pure: no queries)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ..durations import parse_duration
from ..exceptions import InvalidInput
from ..validation import KEY_MAX_LENGTH, checked_text
from .rules import KeyFunction, key_of

Duration = int | str | timedelta


@dataclass(frozen=True)
class Debounce:
    """Starts with the same `key` within `quiet` of each other collapse into one queued run, the
    latest start's input winning; it is admitted once `quiet` passes without a new start, and at
    the latest `max_wait` after the first (None: no bound). `key` is a string (one key for every
    run) or `f(input) -> str`; `quiet` and `max_wait` are durations (ms ints, "5s", timedelta)."""

    key: str | KeyFunction
    quiet: Duration
    max_wait: Duration | None = None
    quiet_ms: int = field(init=False, repr=False)
    max_wait_ms: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.key):
            checked_text(self.key, "Debounce key", max_length=KEY_MAX_LENGTH)
        quiet_ms = parse_duration(self.quiet, what="Debounce quiet")
        if quiet_ms <= 0:
            raise InvalidInput(f"Debounce quiet must be longer than 0 ms, not {self.quiet!r}.")
        max_wait_ms = None
        if self.max_wait is not None:
            max_wait_ms = parse_duration(self.max_wait, what="Debounce max_wait")
            if max_wait_ms < quiet_ms:
                raise InvalidInput(
                    f"Debounce max_wait ({self.max_wait!r}) must be at least its quiet "
                    f"({self.quiet!r}): a run is never admitted before quiet has passed."
                )
        object.__setattr__(self, "quiet_ms", quiet_ms)
        object.__setattr__(self, "max_wait_ms", max_wait_ms)


def run_debounce_key(rule: Debounce, workflow: str, input: object) -> str:
    """The key `rule` gives a start of `workflow` with `input`; InvalidInput when the key
    function raises or returns anything but a non-empty string that fits its column."""
    return key_of(rule.key, "debounce", workflow, input)
