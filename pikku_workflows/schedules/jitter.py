"""Deterministic jitter: each tick's delay in [0, jitter) derives from the schedule and the
tick's nominal time, so every timer loop (and every retry of a firing) computes the same."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta


def jitter_delay(schedule: str, nominal_at: datetime, jitter_ms: int | None) -> timedelta:
    """The delay of the tick of `schedule` at `nominal_at`: 0 without jitter."""
    if not jitter_ms:
        return timedelta()
    digest = hashlib.sha256(f"{schedule}\x00{nominal_at.isoformat()}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % jitter_ms)
