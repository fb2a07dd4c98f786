"""When a schedule fires: a 5-field cron expression (cronsim, which keeps Debian cron's DST
rules) or an `every=` interval, in an IANA zone, between `start_at` and `end_at`.

DST rules (docs/schedules.md): a cron time a jump skips fires once, at the first valid instant
after the gap; a repeated one fires once, at its first occurrence, when neither the minute nor
the hour field starts with `*`; otherwise every real instant that matches fires. `every` of a
whole number of days steps calendar days at the anchor's wall time, with the same gap and
repeat rules; shorter intervals are real time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

from cronsim import CronSim

from . import wall_clock

DAY_MS = 86_400_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class FireRule:
    """When a schedule fires. Exactly one of `cron` and `every_ms`; `zone` an IANA zone;
    `start_at` (inclusive) and `end_at` (exclusive) aware datetimes or None."""

    cron: str | None = None
    every_ms: int | None = None
    zone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None

    def __post_init__(self) -> None:
        assert (self.cron is None) != (self.every_ms is None), "exactly one of cron and every"


def fire_times(rule: FireRule, after: datetime) -> Iterator[datetime]:
    """The fire times strictly after `after` (aware), in order, as aware datetimes in UTC."""
    zone = wall_clock.zone_of(rule.zone)
    # The first fire may be start_at itself: begin just before it.
    begin = after
    if rule.start_at is not None and rule.start_at > after:
        begin = rule.start_at - timedelta(microseconds=1)
    if rule.cron is not None:
        times = _cron_times(rule.cron, zone, begin)
    else:
        assert rule.every_ms is not None
        times = _every_times(rule.every_ms, zone, rule.start_at, begin)
    for instant in times:
        if rule.end_at is not None and instant >= rule.end_at:
            return
        yield instant


def _cron_times(cron: str, zone: tzinfo, after: datetime) -> Iterator[datetime]:
    if isinstance(zone, ZoneInfo) and not keeps_wall_time(cron):
        yield from _real_time_cron_times(cron, zone, after)
        return
    iterator = CronSim(cron, after.astimezone(zone))
    while True:
        try:
            instant = next(iterator).astimezone(UTC)
        except StopIteration:
            return
        # In a repeated hour cronsim reads `after` by its wall time alone, so it may answer
        # the first occurrence of a time `after` already passed.
        if instant > after:
            yield instant


def keeps_wall_time(cron: str) -> bool:
    """Whether the expression fires at set wall times (neither its minute nor its hour field
    starts with `*`): then a skipped time fires after the gap and a repeated one once, as in
    Debian cron; otherwise it fires at every real instant whose wall time matches."""
    minute, hour = cron.split()[:2]
    return not minute.startswith("*") and not hour.startswith("*")


def _real_time_cron_times(cron: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    # Stretch by stretch of one UTC offset, each with cronsim in that fixed offset: cronsim's
    # own stepping jumps whole hours in real time and misses a 30-minute repeat (Lord Howe).
    start = after
    while True:
        first = start + timedelta(microseconds=1)
        offset = first.astimezone(zone).utcoffset()
        assert offset is not None
        end = wall_clock.next_offset_change(zone, first)
        for candidate in CronSim(cron, start.astimezone(dt_timezone(offset))):
            instant = candidate.astimezone(UTC)
            if instant >= end:
                break
            yield instant
        else:
            return
        start = end - timedelta(microseconds=1)


def _every_times(
    every_ms: int, zone: tzinfo, anchor: datetime | None, after: datetime
) -> Iterator[datetime]:
    if every_ms % DAY_MS == 0:
        yield from _calendar_day_times(every_ms // DAY_MS, zone, anchor, after)
        return
    start = anchor if anchor is not None else EPOCH
    step = timedelta(milliseconds=every_ms)
    index = max(0, (after - start) // step + 1)
    while True:
        instant = start + index * step
        if instant > after:
            yield instant.astimezone(UTC)
        index += 1


def _calendar_day_times(
    days: int, zone: tzinfo, anchor: datetime | None, after: datetime
) -> Iterator[datetime]:
    # The anchor's wall time, repeated every `days` calendar days in the zone.
    anchor_wall = (
        anchor.astimezone(zone).replace(tzinfo=None) if anchor is not None else datetime(1970, 1, 1)
    )
    after_date = after.astimezone(zone).date()
    # Start a period early: the wall time on after's own date may still be ahead of it.
    index = max(0, (after_date - anchor_wall.date()).days // days - 1)
    while True:
        instant = wall_clock.resolve(anchor_wall + timedelta(days=index * days), zone)
        if instant > after:
            yield instant
        index += 1
