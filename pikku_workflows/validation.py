"""Checks of the names, keys and texts callers hand the engine, with the column limits they must
fit (pure: the models take their `max_length` from here, so the two cannot drift apart).

A value that fails is an `InvalidInput` raised before anything is written: never a truncated
value, never a database error.
"""

from __future__ import annotations

from typing import Any

from .exceptions import InvalidInput

NAME_MAX_LENGTH = 200  # workflow and step function names
KEY_MAX_LENGTH = 255  # step keys, idempotency keys, subject ids
REASON_MAX_LENGTH = 2000  # operator reasons, suspend reasons
MAX_RETRIES = 1000


def checked_text(value: Any, what: str, *, max_length: int, allow_empty: bool = False) -> str:
    """`value` if it is a string the database stores as given; else InvalidInput naming `what`."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__} {value!r:.80}.")
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{what} must not be empty.")
    if len(value) > max_length:
        raise InvalidInput(
            f"{what} is {len(value)} characters long; at most {max_length} fit: {value[:40]!r}…"
        )
    problem = text_problem(value)
    if problem:
        raise InvalidInput(f"{what} {problem}: {value[:80]!r}")
    return value


def text_problem(text: str) -> str | None:
    """Why the database would refuse `text`, or None: a NUL or a lone surrogate."""
    if "\x00" in text:
        return "contains the NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def checked_retries(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise InvalidInput(f"retries must be an int from 0 to {MAX_RETRIES}, not {value!r}.")
    return value
