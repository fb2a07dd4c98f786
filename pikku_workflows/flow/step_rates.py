"""A step function's own rate (`pw.Rate`): its attempts spaced per key computed from the step's
data, and the rule name its rate rows go under (pure: no queries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..exceptions import InvalidInput
from ..validation import KEY_MAX_LENGTH
from .rates import ParsedRate, parse_rate

RateKey = str | Callable[[Any], Any] | None
# A step function's own rate rows are kept under this prefix: no named limit can take the name
# (`define_limit` refuses names with a colon).
STEP_RATE_PREFIX = "step:"


class Rate:
    """`@pw.step_function(rate=pw.Rate(key=lambda data: data["shop"], rate="2/s", burst=1))`:
    attempts of the step function with the same key start at most `rate`, with up to `burst`
    more at once after a quiet spell. `key` is a function of the step's data, a string, or None
    (one key for every attempt)."""

    __slots__ = ("burst", "key", "parsed", "rate")

    def __init__(self, *, rate: str, burst: int = 0, key: RateKey = None) -> None:
        if key is not None and not callable(key) and (not isinstance(key, str) or not key):
            raise InvalidInput(
                f"A step rate's key must be a function of the step's data or a non-empty "
                f"string, not {key!r:.60}."
            )
        self.parsed: ParsedRate = parse_rate(rate, burst=burst, what="step rate")
        self.rate, self.burst, self.key = rate, burst, key

    def __repr__(self) -> str:
        return f"Rate(rate={self.rate!r}, burst={self.burst!r}, key={self.key!r})"


def rate_rule(function_name: str) -> str:
    """The name a step function's own rate rows go under."""
    return f"{STEP_RATE_PREFIX}{function_name}"


def step_rate_key(rate: Rate, data: Any, function_name: str) -> str:
    """The key an attempt of `function_name` on `data` is spaced under; InvalidInput when the
    key function raises or answers anything but a non-empty string of at most 255 characters."""
    if rate.key is None:
        return ""
    if isinstance(rate.key, str):
        return rate.key
    try:
        key = rate.key(data)
    except Exception as exc:
        raise InvalidInput(
            f"The rate key function of step function {function_name!r} raised {exc!r:.120}."
        ) from exc
    if not isinstance(key, str) or not key or len(key) > KEY_MAX_LENGTH:
        raise InvalidInput(
            f"The rate key function of step function {function_name!r} must return a "
            f"non-empty string of at most {KEY_MAX_LENGTH} characters, not {key!r:.60}."
        )
    return key
