"""Durations as authors write them: an int of milliseconds, "500ms|10s|5m|2h|1d|1w", or a
`timedelta`; at most `MAX_DURATION_MS` (ten years), so every timer fits a timestamp."""

from __future__ import annotations

import re
from datetime import timedelta

from .exceptions import InvalidInput

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# ASCII digits only: `\d` would also accept other scripts' digits (a fullwidth "5s").
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d|w)$")
MAX_DURATION_MS = 3650 * _UNIT_MS["d"]


def parse_duration(
    value: int | str | timedelta, *, what: str = "duration", limit_ms: int = MAX_DURATION_MS
) -> int:
    """Return the duration in milliseconds; raise InvalidInput (naming `what`) for anything
    else or anything longer than `limit_ms`."""
    milliseconds = _milliseconds(value)
    if milliseconds > limit_ms:
        raise InvalidInput(
            f"The {what} {value!r} is too long: at most {limit_ms} ms ({_readable(limit_ms)})."
        )
    return milliseconds


def _milliseconds(value: int | str | timedelta) -> int:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidInput(f"A duration cannot be negative: {value}.")
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(
            f"A duration is an int of milliseconds, a string like '10s' or a timedelta, "
            f"not {value!r}."
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


def _readable(milliseconds: int) -> str:
    for unit in ("w", "d", "h", "m", "s"):
        if milliseconds % _UNIT_MS[unit] == 0:
            return f"{milliseconds // _UNIT_MS[unit]}{unit}"
    return f"{milliseconds}ms"
