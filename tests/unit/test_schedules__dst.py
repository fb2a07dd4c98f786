"""The DST rules of schedules (docs/schedules.md), checked at every change of UTC offset from
2020 to 2030 in zones that between them have every kind: northern and southern hemisphere,
jumps at midnight (Santiago, Havana, Asuncion), a 30-minute DST (Lord Howe), a 45-minute offset
(Chatham), negative DST (Dublin, Casablanca) and zones that changed their offset for good
(Volgograd, Mexico City, Tehran, Asuncion, Cairo's return to DST)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest

from pikku_workflows.schedules import FireRule, fire_times

ZONES = [
    "Europe/Helsinki",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Berlin",
    "Europe/Volgograd",
    "America/New_York",
    "America/Los_Angeles",
    "America/St_Johns",
    "America/Havana",
    "America/Santiago",
    "America/Asuncion",
    "America/Mexico_City",
    "Atlantic/Azores",
    "Australia/Sydney",
    "Australia/Adelaide",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Africa/Cairo",
    "Africa/Casablanca",
    "Asia/Tehran",
    "Asia/Beirut",
]
FROM, UNTIL = datetime(2020, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)


def transitions(zone: ZoneInfo) -> Iterator[tuple[datetime, timedelta, timedelta]]:
    """Each instant from 2020 to 2030 when the zone's UTC offset changes: (instant, offset
    before, offset after)."""
    day = FROM
    while day < UNTIL:
        following = day + timedelta(days=1)
        before, after = day.astimezone(zone).utcoffset(), following.astimezone(zone).utcoffset()
        if before != after:
            low, high = day, following
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            assert before is not None and after is not None
            yield high.replace(microsecond=0), before, after
        day = following


def fires_between(rule: FireRule, start: datetime, end: datetime) -> list[datetime]:
    return list(takewhile(lambda instant: instant < end, fire_times(rule, start)))


def walls_inside(start: datetime, length: timedelta) -> list[datetime]:
    """Wall times (whole minutes) at the start, middle and end of a gap or a repeat."""
    last = start + length - timedelta(minutes=1)
    middle = start + timedelta(minutes=int(length.total_seconds() // 120))
    return sorted({start, middle, last})


@pytest.fixture(scope="module", params=ZONES)
def zone_transitions(request):
    zone = ZoneInfo(request.param)
    found = list(transitions(zone))
    return request.param, zone, found


def test_dst__the_zones_cover_every_kind_of_change(zone_transitions):
    name, _, found = zone_transitions
    assert found, f"{name} changes its offset between 2020 and 2030"


def test_dst__a_skipped_wall_time_fires_once_at_the_end_of_the_gap(zone_transitions):
    name, _zone, found = zone_transitions
    for instant, before, after in (t for t in found if t[2] > t[1]):
        gap_start = (instant + before).replace(tzinfo=None)
        for wall in walls_inside(gap_start, after - before):
            cron = f"{wall.minute} {wall.hour} {wall.day} {wall.month} *"
            rule = FireRule(cron=cron, zone=name)
            fired = fires_between(rule, instant - timedelta(days=2), instant + timedelta(days=2))
            assert fired == [instant], (name, cron, instant)


def test_dst__a_repeated_wall_time_fires_once_at_its_first_occurrence(zone_transitions):
    name, zone, found = zone_transitions
    for instant, before, after in (t for t in found if t[2] < t[1]):
        repeat_start = (instant + after).replace(tzinfo=None)
        for wall in walls_inside(repeat_start, before - after):
            cron = f"{wall.minute} {wall.hour} {wall.day} {wall.month} *"
            rule = FireRule(cron=cron, zone=name)
            fired = fires_between(rule, instant - timedelta(days=2), instant + timedelta(days=2))
            first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            assert fired == [first], (name, cron, instant)
            assert first < instant  # the first occurrence is before the clocks go back


def test_dst__a_wildcard_hour_fires_at_every_real_matching_instant(zone_transitions):
    name, zone, found = zone_transitions
    for instant, before, after in found:
        start, end = instant - timedelta(hours=3), instant + timedelta(hours=3)
        for minute in sorted({(instant + before).minute, (instant + after).minute, 15, 45}):
            rule = FireRule(cron=f"{minute} * * * *", zone=name)
            expected = [
                moment
                for moment in (start + timedelta(minutes=m) for m in range(1, 360))
                if moment.astimezone(zone).minute == minute
            ]
            assert fires_between(rule, start, end) == expected, (name, minute, instant)


def test_dst__every_day_keeps_the_wall_time_and_follows_the_gap_and_repeat_rules(zone_transitions):
    name, zone, found = zone_transitions
    for instant, before, after in found:
        moved = (instant + min(before, after)).replace(tzinfo=None)
        wall = moved + abs(after - before) / 2
        anchor_wall = wall - timedelta(days=10)
        anchor = anchor_wall.replace(tzinfo=zone).astimezone(UTC)
        if not _exists(anchor_wall, zone):
            continue  # the anchor itself fell in another change
        rule = FireRule(every_ms=86_400_000, zone=name, start_at=anchor)
        fired = fires_between(
            rule, instant - timedelta(days=1, hours=12), instant + timedelta(days=1)
        )
        on_that_day = [t for t in fired if t.astimezone(zone).date() == wall.date()]
        if after > before:
            assert on_that_day == [instant], (name, wall)
        else:
            assert on_that_day == [wall.replace(tzinfo=zone, fold=0).astimezone(UTC)], (name, wall)


def test_dst__fire_times_rise_strictly_and_are_utc(zone_transitions):
    name, _, found = zone_transitions
    for cron in ("0 2 * * *", "30 1 * * *", "*/20 * * * *", "0 0 * * *"):
        rule = FireRule(cron=cron, zone=name)
        for instant, _, _ in found[:6]:
            after = instant - timedelta(days=1)
            times = list(islice(fire_times(rule, after), 80))
            assert all(t.tzinfo is UTC for t in times)
            assert times[0] > after
            assert all(a < b for a, b in pairwise(times)), (name, cron)


def _exists(wall: datetime, zone: ZoneInfo) -> bool:
    return wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall
