"""The JSON round trip every stored value goes through, rejecting what jsonb cannot hold."""

from __future__ import annotations

import json
import re
from typing import Any

# `\u0000` escapes a NUL only after an even number of backslashes; `\\u0000` is a literal
# backslash followed by "u0000", which jsonb stores fine.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class NotStorableJson(ValueError):
    """A value cannot be stored as JSON; the message says why."""


def round_trip(value: Any) -> Any:
    """Return `value` as it will read back from the database (tuples become lists, ...).

    NaN and ±Infinity (not JSON) and the NUL character (jsonb refuses it) are rejected here,
    before anything is written.
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NotStorableJson(str(exc)) from exc
    if _NUL_ESCAPE.search(text):
        raise NotStorableJson("strings may not contain the NUL character (\\u0000)")
    return json.loads(text)


def describe_error(
    exc: BaseException, *, code: str | None = None, step_key: str | None = None
) -> dict[str, Any]:
    """The stored shape of an error: {code, message, type, traceback?, step_key?}."""
    import traceback

    error: dict[str, Any] = {
        "code": code or getattr(exc, "code", None) or type(exc).__name__,
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
    if step_key is not None:
        error["step_key"] = step_key
    return round_trip_or_text(error)


def round_trip_or_text(value: dict[str, Any]) -> dict[str, Any]:
    """An error dict made storable: only the parts jsonb refuses are rewritten as text."""
    try:
        return round_trip(value)
    except NotStorableJson:
        return {_storable_text(key): _storable(item) for key, item in value.items()}


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return _storable_text(value)
    if isinstance(value, dict):
        return {_storable_text(str(key)): _storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    try:
        return round_trip(value)
    except NotStorableJson:
        return _storable_text(repr(value))


def _storable_text(text: str) -> str:
    return text.replace("\x00", "\\x00")
