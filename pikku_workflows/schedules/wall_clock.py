"""Wall-clock times in IANA zones on DST days: a wall time a jump skips becomes the first
valid instant after the gap; a repeated wall time is its first occurrence. And the instants
a zone changes its UTC offset, which `zoneinfo` does not list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

# Transitions happen on whole seconds, so the bisection stops there.
ONE_SECOND = timedelta(seconds=1)


def zone_of(name: str) -> tzinfo:
    """The zone named `name`; plain UTC when it is UTC (no DST to look for)."""
    return UTC if name == "UTC" else ZoneInfo(name)


def exists(wall: datetime, zone: tzinfo) -> bool:
    """Whether the naive wall time `wall` happens in `zone` (a DST jump skips some)."""
    aware = wall.replace(tzinfo=zone, fold=0)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def resolve(wall: datetime, zone: tzinfo) -> datetime:
    """The instant (in UTC) of the naive wall time `wall` in `zone`: its first occurrence, or,
    when a DST jump skips it, the first valid instant after the gap."""
    if exists(wall, zone):
        return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    # In a gap, fold=1 reads the wall time with the offset after the jump (an instant before
    # the jump) and fold=0 with the offset before it (an instant after the jump).
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    after = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if before > after:
        before, after = after, before
    return _first_with_offset_of(after, before, zone)


def shifted_by_dst(instant: datetime, wall: datetime, zone: tzinfo) -> bool:
    """Whether `instant` fires away from the wall time `wall` (a gap moved it)."""
    return instant.astimezone(zone).replace(tzinfo=None) != wall


def next_offset_change(zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after `after` when `zone`'s UTC offset changes; when none comes by the
    end of the next year, that year's end (the offset is the same on both sides of it)."""
    for year in (after.year, after.year + 1):
        for change in _offset_changes_in(zone.key, year):
            if change > after:
                return change
    return datetime(after.year + 2, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=1024)
def _offset_changes_in(zone_name: str, year: int) -> tuple[datetime, ...]:
    zone = ZoneInfo(zone_name)
    changes = []
    day, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    while day < end:
        following = day + timedelta(days=1)
        if day.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            changes.append(_first_with_offset_of(following, day, zone))
        day = following
    return tuple(changes)


def _first_with_offset_of(late: datetime, early: datetime, zone: tzinfo) -> datetime:
    """Bisect (early, late] to the first instant with `late`'s offset."""
    offset = late.astimezone(zone).utcoffset()
    while late - early > ONE_SECOND:
        middle = (early + (late - early) / 2).replace(microsecond=0)
        if middle.astimezone(zone).utcoffset() == offset:
            late = middle
        else:
            early = middle
    return late
