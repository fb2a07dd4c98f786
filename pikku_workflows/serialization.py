"""The JSON round trip every stored value goes through, rejecting what jsonb cannot hold or what
is too large to store (`MAX_PAYLOAD_BYTES`). What Django models hold (`Decimal`, `date`,
`datetime`, `UUID`, ...) is encoded by `DjangoJSONEncoder` and comes back as its JSON string."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .conf import pikku_settings

# `\u0000` escapes a NUL only after an even number of backslashes; `\\u0000` is a literal
# backslash followed by "u0000", which jsonb stores fine.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# The deepest nesting of lists and objects a stored value may have. Code that walks a value
# (references in a graph node's input, the admin's rendering) recurses, and Python's own limit
# sits near 1,000 frames of which a worker already uses some: a value accepted at the start
# must still be readable deep inside a pass. The HTTP API's parser refuses deeper bodies too.
MAX_NESTING_DEPTH = 256


class NotStorableJson(ValueError):
    """A value cannot be stored as JSON; the message says why."""


class NestedTooDeeply(NotStorableJson):
    """A value holds lists or objects nested deeper than MAX_NESTING_DEPTH."""

    def __init__(self) -> None:
        super().__init__(f"the value is nested deeper than {MAX_NESTING_DEPTH} levels")


def round_trip(value: Any, *, name: str = "the value", instance_hint: str = "") -> Any:
    """Return `value` as it will read back from the database (tuples become lists, ...).

    `Decimal`, `date`, `datetime`, `time`, `timedelta` and `UUID` become the strings
    `DjangoJSONEncoder` writes for them ("12.50", "2024-05-01", "2024-05-01T10:00:00Z", ...):
    the same value on the first run as on replay. Rejected here, before anything is written:
    what is not JSON (NaN, ±Infinity, other objects), what jsonb refuses (the NUL character,
    lone surrogates), values nested deeper than `MAX_NESTING_DEPTH`, and encodings longer than
    `MAX_PAYLOAD_BYTES`. An object that is not JSON is named by where it is (`name` the
    value's own name: `input['user'] is a User: pass its pk`, then `instance_hint` for a model
    instance).
    """
    if pikku_settings.MAX_PAYLOAD_BYTES >= _PLAIN_BYTES:
        copied = _plain_copy(value, [_PLAIN_PARTS])
        if copied is not _NOT_PLAIN:
            return copied
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, cls=DjangoJSONEncoder)
    except RecursionError:
        raise NestedTooDeeply() from None
    except TypeError as exc:
        found = _not_json(value, name)
        if found is None:
            raise NotStorableJson(str(exc)) from exc
        raise NotStorableJson(_describe_not_json(*found, instance_hint)) from exc
    except ValueError as exc:
        raise NotStorableJson(str(exc)) from exc
    if _NUL_ESCAPE.search(text):
        raise NotStorableJson("strings may not contain the NUL character (\\u0000)")
    encoded = _utf8(text)
    limit = pikku_settings.MAX_PAYLOAD_BYTES
    if len(encoded) > limit:
        raise NotStorableJson(
            f"the value takes {len(encoded)} bytes as JSON; at most {limit} bytes fit"
        )
    decoded = json.loads(encoded)
    # Fewer brackets than the limit cannot nest deeper than it: most values skip the walk.
    if text.count("[") + text.count("{") > MAX_NESTING_DEPTH:
        check_nesting(decoded)
    return decoded


# A value of at most _PLAIN_PARTS parts, each one JSON reads back as it was written, is copied
# instead of encoded and decoded (a step's small input or result, every step). Its encoding is
# at most _PLAIN_BYTES (a character escapes to at most 6), so a MAX_PAYLOAD_BYTES below that
# turns the shortcut off.
_PLAIN_PARTS = 64
_PLAIN_TEXT = 256
_PLAIN_INT = 2**53
_PLAIN_BYTES = _PLAIN_PARTS * (6 * _PLAIN_TEXT + 8)
_NOT_PLAIN = object()


def _plain_copy(value: Any, budget: list[int]) -> Any:
    """A copy of `value` when the JSON round trip would give it back unchanged (dicts with string
    keys, lists, ASCII strings without NUL, whole numbers, finite floats, booleans, None; within
    the budget of parts), else _NOT_PLAIN."""
    budget[0] -= 1
    if budget[0] < 0:
        return _NOT_PLAIN
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is str:
        plain = len(value) <= _PLAIN_TEXT and value.isascii() and "\x00" not in value
        return value if plain else _NOT_PLAIN
    if kind is int:
        return value if -_PLAIN_INT < value < _PLAIN_INT else _NOT_PLAIN
    if kind is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if kind is list:
        items = [_plain_copy(item, budget) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    if kind is dict:
        copy = {}
        for key, item in value.items():
            if type(key) is not str or _plain_copy(key, budget) is _NOT_PLAIN:
                return _NOT_PLAIN
            copy[key] = _plain_copy(item, budget)
            if copy[key] is _NOT_PLAIN:
                return _NOT_PLAIN
        return copy
    return _NOT_PLAIN


def loads_json(text: str | bytes) -> Any:
    """`json.loads` for text a caller hands us (a form, a file): nesting deeper than
    MAX_NESTING_DEPTH is NestedTooDeeply (a ValueError), never a RecursionError."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise NestedTooDeeply() from None
    check_nesting(value)
    return value


def check_nesting(value: Any) -> None:
    """Raise NestedTooDeeply when `value` nests lists and dicts deeper than MAX_NESTING_DEPTH;
    walked level by level, without recursion."""
    level, depth = ([value] if isinstance(value, dict | list) else []), 0
    while level:
        depth += 1
        if depth > MAX_NESTING_DEPTH:
            raise NestedTooDeeply()
        inner: list[Any] = []
        for container in level:
            items = container.values() if isinstance(container, dict) else container
            inner.extend(item for item in items if isinstance(item, dict | list))
        level = inner


def _not_json(value: Any, path: str) -> tuple[str, Any] | None:
    """Where the first value DjangoJSONEncoder cannot write is (its path from `path`), and it."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"{path} key {key!r}", key
            found = _not_json(item, f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _not_json(item, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return None
    try:
        DjangoJSONEncoder().default(value)
    except TypeError:
        return path, value
    return None


def _describe_not_json(path: str, value: Any, instance_hint: str) -> str:
    kind = type(value).__name__
    # A model instance (duck-typed: this module imports no models).
    if hasattr(getattr(value, "_meta", None), "concrete_model") and hasattr(value, "pk"):
        return f"{path} is a {kind}: pass its pk{instance_hint}"
    return f"{path} is a {kind}, which is not JSON: pass what it holds as JSON values"


def _utf8(text: str) -> bytes:
    """The text as UTF-8, a surrogate pair joined into the character it encodes (as jsonb reads
    its escape); a lone surrogate is no character at all, and jsonb refuses it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-16", "surrogatepass").decode("utf-16").encode("utf-8")
    except UnicodeError:
        raise NotStorableJson(
            "strings may not contain a lone surrogate (\\ud800-\\udfff)"
        ) from None


def describe_error(
    exc: BaseException, *, step_key: str | None = None, traceback: bool = True
) -> dict[str, Any]:
    """The stored shape of an error: {code, message, type, traceback?, step_key?}; the code is
    the exception's own (`WorkflowError.code`) or its class name. Errors the engine records
    itself (a timeout, a lost lease) have no traceback worth keeping."""
    import traceback as tracebacks

    error: dict[str, Any] = {
        "code": getattr(exc, "code", None) or type(exc).__name__,
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
    }
    if traceback:
        error["traceback"] = "".join(tracebacks.format_exception(exc))
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
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
