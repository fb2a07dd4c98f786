"""The JSON round trip every stored value goes through, rejecting what jsonb cannot hold."""

from __future__ import annotations

import json
from typing import Any


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
    if "\\u0000" in text:
        raise NotStorableJson("strings may not contain the NUL character (\\u0000)")
    return json.loads(text)
