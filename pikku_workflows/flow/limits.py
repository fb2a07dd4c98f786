"""Named limits (`pw.define_limit`): a rate shared by every workflow that names the limit,
declared in code as a default an operator may edit at run time (the `WorkflowLimit` row)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..exceptions import InvalidInput
from ..validation import NAME_MAX_LENGTH, checked_text
from .rates import ParsedRate, parse_rate

# The most attempts one limit may let run at once.
MAX_RUNNING = 100_000


@dataclass(frozen=True)
class Limit:
    """The limit `name`: starts and step attempts naming it are spaced by `rate` (None: no
    rate), and at most `max_running` of its step attempts execute at once (None: no bound)."""

    name: str
    rate_text: str | None
    rate: ParsedRate | None
    max_running: int | None = None


def define(
    name: object, *, rate: object = None, burst: object = 0, max_running: object = None
) -> Limit:
    """The limit, checked: InvalidInput naming the problem (a bad name, rate, burst or
    max_running, or neither a rate nor max_running)."""
    checked_text(name, "A limit name", max_length=NAME_MAX_LENGTH)
    assert isinstance(name, str)
    if ":" in name:
        # A step function's own rate rows go under "step:<function>" beside the limits' rows.
        raise InvalidInput(f"A limit name must not contain a colon: {name!r}.")
    bound = checked_max_running(max_running, name)
    if rate is None:
        if max_running is None:
            raise InvalidInput(f"Limit {name!r} needs a rate, a max_running, or both.")
        parse_rate("1/s", burst=burst, what=f"rate of limit {name!r}")  # the burst, checked
        return Limit(name, None, None, bound)
    parsed = parse_rate(rate, burst=burst, what=f"rate of limit {name!r}")
    assert isinstance(rate, str)
    return Limit(name, rate, parsed, bound)


def checked_max_running(max_running: object, name: str) -> int | None:
    """`max_running` of limit `name`: None, or a whole number from 1 to MAX_RUNNING; else
    InvalidInput."""
    if max_running is not None and (
        isinstance(max_running, bool)
        or not isinstance(max_running, int)
        or not 1 <= max_running <= MAX_RUNNING
    ):
        raise InvalidInput(
            f"max_running of limit {name!r} must be a whole number from 1 to {MAX_RUNNING}, "
            f"not {max_running!r}."
        )
    return max_running


def checked_limit_names(names: object, owner: str) -> tuple[str, ...]:
    """A workflow's `limits=`: a list of limit names (checked when a run starts: limits may be
    defined after the workflow)."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise InvalidInput(f"{owner}: limits must be a list of limit names, not {names!r}.")
    return tuple(
        checked_text(name, f"{owner}: a limit name", max_length=NAME_MAX_LENGTH) for name in names
    )
