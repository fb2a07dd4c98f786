"""Durations as authors write them: an int of milliseconds or "500ms|10s|5m|2h|1d|1w"."""

from __future__ import annotations

import re

from .exceptions import InvalidInput

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# ASCII digits only: `\d` would also accept other scripts' digits (a fullwidth "5s").
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d|w)$")


def parse_duration(value: int | str) -> int:
    """Return the duration in milliseconds; raise InvalidInput for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(
            f"A duration is an int of milliseconds or a string like '10s', not {value!r}."
        )
    if isinstance(value, int):
        if value < 0:
            raise InvalidInput(f"A duration cannot be negative: {value}.")
        return value
    match = _DURATION.match(value.strip())
    if not match:
        raise InvalidInput(
            f"Invalid duration {value!r}: use an int of milliseconds or <number><ms|s|m|h|d|w>."
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
