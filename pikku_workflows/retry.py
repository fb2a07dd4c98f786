"""Retry policy owned by the workflow: how many attempts a step gets and how long to wait."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from .durations import parse_duration
from .validation import checked_retries

EXPONENTIAL = "exponential"
EXPONENTIAL_BASE_MS = 1_000
EXPONENTIAL_CAP_MS = 300_000
JITTER = 0.2


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` extra attempts; `delay_ms` None means exponential backoff."""

    retries: int
    delay_ms: int | None

    @classmethod
    def resolve(
        cls, retries: int | None, retry_delay: int | str | timedelta | None, default: int
    ) -> RetryPolicy:
        # Resolved once and stored on the step row: `retries=0` means exactly one attempt.
        resolved = checked_retries(default if retries is None else retries)
        if retry_delay is None or retry_delay == EXPONENTIAL:
            return cls(resolved, None)
        return cls(resolved, parse_duration(retry_delay))

    @property
    def attempt_limit(self) -> int:
        return self.retries + 1

    @property
    def stored_delay(self) -> str:
        return EXPONENTIAL if self.delay_ms is None else str(self.delay_ms)

    @classmethod
    def from_stored(cls, retries: int, stored_delay: str) -> RetryPolicy:
        return cls(retries, None if stored_delay in ("", EXPONENTIAL) else int(stored_delay))

    def backoff_ms(self, failed_attempt: int, rng: random.Random | None = None) -> int:
        """The wait after attempt `failed_attempt` (1-based) failed."""
        if self.delay_ms is not None:
            return self.delay_ms
        base = min(EXPONENTIAL_BASE_MS * 2 ** (failed_attempt - 1), EXPONENTIAL_CAP_MS)
        spread = (rng or random).uniform(-JITTER, JITTER)
        # Jitter spreads retries out, but never past the cap.
        return min(int(base * (1 + spread)), EXPONENTIAL_CAP_MS)
