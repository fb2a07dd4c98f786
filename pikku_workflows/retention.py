"""How long ended runs are kept (pure): which statuses a purge may take, and the retention maps
of the `RETENTION` setting and `@pw.workflow(retention=...)` read into milliseconds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .durations import parse_duration
from .exceptions import InvalidInput
from .status import TERMINAL_RUN_STATUSES

# Only a run that has ended can be purged; the rest of its tree is checked when it is taken.
PURGEABLE_STATUSES = tuple(sorted(TERMINAL_RUN_STATUSES))


def checked_statuses(statuses: Any) -> tuple[str, ...]:
    """The statuses a purge takes: a non-empty collection of ended run statuses."""
    if isinstance(statuses, str) or not isinstance(statuses, Iterable):
        raise InvalidInput(
            f"statuses is a list of run statuses ({', '.join(PURGEABLE_STATUSES)}), "
            f"not {statuses!r}."
        )
    chosen = tuple(dict.fromkeys(statuses))
    unknown = [status for status in chosen if status not in PURGEABLE_STATUSES]
    if unknown or not chosen:
        raise InvalidInput(
            f"statuses must be among {', '.join(PURGEABLE_STATUSES)} (runs that ended), "
            f"not {list(chosen)!r}."
        )
    return chosen


def parse_retention(retention: Any, *, what: str) -> dict[str, int]:
    """`{status: duration}` (e.g. `{"completed": "14d"}`) as `{status: milliseconds}`; a status
    that has not ended, or a duration that is not one, is InvalidInput naming `what`."""
    if not isinstance(retention, Mapping):
        raise InvalidInput(f'{what} is a dict of status to duration ({{"completed": "30d"}}).')
    if retention:
        checked_statuses(list(retention))
    kept = {}
    for status, duration in retention.items():
        try:
            kept[status] = parse_duration(duration, what=f"{what} for {status!r}")
        except InvalidInput as exc:
            raise InvalidInput(f"{what} for {status!r}: {exc.message}") from exc
    return kept


# A purge's batch holds the row locks of the runs it takes until it commits: each is sized to
# hold them about this long (claims skip those runs meanwhile, never wait, but operators do).
BATCH_TARGET_MS = 150.0
# The first batch's size, before a batch's duration has said what this database takes.
FIRST_BATCH = 10


def next_batch_size(size: int, took_ms: float, most: int) -> int:
    """The next batch's size after one of `size` runs took `took_ms`: scaled toward
    BATCH_TARGET_MS, at most doubled (one fast batch proves little), at least 1, at most
    `most` (PURGE_BATCH or the purge's `batch`)."""
    scaled = int(size * BATCH_TARGET_MS / max(took_ms, 1.0))
    return max(1, min(most, 2 * size, scaled))
