"""Rates ("10/s", "600/m") and the generic cell rate algorithm (GCRA) that spaces starts under
them: each start is given the earliest time it may begin, so that over any window of the period
at most `count + burst` starts begin. The engine runs the same arithmetic in one statement on
the database clock (`engine/store/rate_transitions.sql`); this module parses and checks rates
and states the arithmetic for tests and benches (pure: no queries)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..exceptions import InvalidInput

_PERIOD_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# ASCII digits only, as durations: "10/s", "600/m", "5/h", "100/d".
_RATE = re.compile(r"^([0-9]+)/(s|m|h|d)$")
MAX_BURST = 1_000_000


@dataclass(frozen=True)
class ParsedRate:
    """`count` starts per `period_ms`, with up to `burst` more at once after a quiet spell."""

    count: int
    period_ms: int
    burst: int = 0

    @property
    def emission_ms(self) -> float:
        """The spacing of starts at the steady rate (GCRA's emission interval)."""
        return self.period_ms / self.count

    @property
    def tolerance_ms(self) -> float:
        """How far ahead of the steady spacing a start may begin (the burst's allowance)."""
        return self.burst * self.emission_ms


def parse_rate(rate: object, *, burst: object = 0, what: str = "rate") -> ParsedRate:
    """A `ParsedRate` from "N/s|m|h|d" and a burst (a whole number ≥ 0); InvalidInput naming `what`
    and the problem otherwise."""
    match = _RATE.match(rate) if isinstance(rate, str) else None
    if match is None or int(match.group(1)) < 1:
        raise InvalidInput(
            f'The {what} must look like "10/s", "600/m", "5/h" or "100/d" (at least 1 per '
            f"period), not {rate!r}."
        )
    if isinstance(burst, bool) or not isinstance(burst, int) or not 0 <= burst <= MAX_BURST:
        raise InvalidInput(
            f"The burst of the {what} must be a whole number from 0 to {MAX_BURST}, not {burst!r}."
        )
    return ParsedRate(int(match.group(1)), _PERIOD_MS[match.group(2)], burst)


def schedule_start(rate: ParsedRate, tat_ms: float | None, now_ms: float) -> tuple[float, float]:
    """GCRA for one start at `now_ms` given the theoretical arrival time `tat_ms` the previous
    start left (None: no start yet): returns (when it may begin, the new theoretical arrival
    time). Every start is accepted and given its time; none is refused."""
    arrival = now_ms if tat_ms is None else max(tat_ms, now_ms)
    begins = max(arrival - rate.tolerance_ms, now_ms)
    return begins, arrival + rate.emission_ms
