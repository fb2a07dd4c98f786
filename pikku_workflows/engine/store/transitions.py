"""What every status change shares (the `*_transitions` modules make them): where the named
statements apply, the check of a move's sources, and the history stamps of a status."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from ...exceptions import InvalidTransition
from ...status import HISTORY_TIMESTAMP

# The history timestamps a move can stamp (created_at is the row's own).
STAMPED = tuple(column for column in HISTORY_TIMESTAMP.values() if column != "created_at")


def on_postgresql() -> bool:
    """True where the named statements apply (PostgreSQL); else the ORM forms run."""
    return transaction.get_connection().vendor == "postgresql"


def checked_sources(
    what: str, target: str, allowed: frozenset[str], expected: Iterable[str] | None
) -> frozenset[str]:
    sources = frozenset(expected) if expected is not None else allowed
    illegal = sources - allowed
    if illegal:
        raise InvalidTransition(what, sorted(illegal)[0], target)
    return sources


def history_stamps(status: str, at: datetime) -> dict[str, datetime | None]:
    """The history timestamps of an attempt reaching `status` at `at` (the one map of
    status.py), every other one None."""
    stamped = HISTORY_TIMESTAMP[status]
    return {column: at if column == stamped else None for column in STAMPED}
