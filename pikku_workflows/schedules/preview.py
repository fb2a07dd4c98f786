"""The next fire times of a definition, for callers and for the admin's preview (each time
with its local wall time and whether a DST change moved it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from ..exceptions import InvalidInput
from . import wall_clock
from .fire_times import FireRule, fire_times
from .spec import parse_fire_rule


def next_fire_times(
    *,
    cron: str | None = None,
    every: int | str | timedelta | None = None,
    timezone: str = "UTC",
    after: datetime | None = None,
    count: int = 10,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> list[datetime]:
    """The next `count` fire times strictly after `after` (default: now) of a schedule with
    this `cron` or `every` in `timezone`, as aware datetimes in UTC; no database. InvalidInput
    lists every problem of the definition."""
    rule = parse_fire_rule(
        cron=cron, every=every, timezone=timezone, start_at=start_at, end_at=end_at
    )
    if after is not None and (not isinstance(after, datetime) or after.tzinfo is None):
        raise InvalidInput("after must be an aware datetime (with a time zone).")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 1000:
        raise InvalidInput(f"count must be a whole number from 0 to 1000, not {count!r:.40}.")
    return list(islice(fire_times(rule, after or datetime.now(UTC)), count))


@dataclass(frozen=True)
class PreviewTime:
    """One previewed fire time: UTC, local, and why it stands out on a DST day."""

    at: datetime
    local: datetime
    # "" on an ordinary day; otherwise what the DST change did to this fire time.
    dst_note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "utc": self.at.isoformat(),
            "local": self.local.isoformat(),
            "dst_note": self.dst_note,
        }


def preview(rule: FireRule, after: datetime, count: int = 10) -> list[PreviewTime]:
    """The next `count` fire times after `after`, each marked when its UTC offset differs from
    the previous one's (the clocks changed in between) or it lands right after a DST gap."""
    zone = wall_clock.zone_of(rule.zone)
    previous_offset = after.astimezone(zone).utcoffset()
    marked = []
    for instant in islice(fire_times(rule, after), count):
        local = instant.astimezone(zone)
        notes = []
        if local.utcoffset() != previous_offset:
            notes.append(f"UTC offset {_offset(previous_offset)} → {_offset(local.utcoffset())}")
        if _just_after_gap(instant, zone):
            notes.append("moved to the end of a skipped hour")
        previous_offset = local.utcoffset()
        marked.append(PreviewTime(instant, local, "; ".join(notes)))
    return marked


def _just_after_gap(instant: datetime, zone: Any) -> bool:
    """Whether the clocks jumped forward in the second before `instant`."""
    before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    return before is not None and after is not None and after > before


def _offset(offset: timedelta | None) -> str:
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
