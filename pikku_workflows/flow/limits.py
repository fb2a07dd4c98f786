"""Named limits (`pw.define_limit`): a rate shared by every workflow that names the limit,
declared in code as a default an operator may edit at run time (the `WorkflowLimit` row)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..exceptions import InvalidInput
from ..validation import NAME_MAX_LENGTH, checked_text
from .rates import ParsedRate, parse_rate


@dataclass(frozen=True)
class Limit:
    """The limit `name`: starts of the workflows that name it are spaced by `rate`."""

    name: str
    rate_text: str
    rate: ParsedRate


def define(name: object, *, rate: object, burst: object = 0) -> Limit:
    """The limit, checked: InvalidInput naming the problem (a bad name, rate or burst)."""
    checked_text(name, "A limit name", max_length=NAME_MAX_LENGTH)
    assert isinstance(name, str)
    if ":" in name:
        # A step function's own rate rows go under "step:<function>" beside the limits' rows.
        raise InvalidInput(f"A limit name must not contain a colon: {name!r}.")
    parsed = parse_rate(rate, burst=burst, what=f"rate of limit {name!r}")
    assert isinstance(rate, str)
    return Limit(name, rate, parsed)


def checked_limit_names(names: object, owner: str) -> tuple[str, ...]:
    """A workflow's `limits=`: a list of limit names (checked when a run starts: limits may be
    defined after the workflow)."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise InvalidInput(f"{owner}: limits must be a list of limit names, not {names!r}.")
    return tuple(
        checked_text(name, f"{owner}: a limit name", max_length=NAME_MAX_LENGTH) for name in names
    )
