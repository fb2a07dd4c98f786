"""Deterministic jitter, and which due ticks a firing starts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from pikku_workflows.schedules.catch_up import ticks_to_start
from pikku_workflows.schedules.jitter import jitter_delay

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


@given(
    name=st.text(min_size=1, max_size=30),
    nominal=st.datetimes(timezones=st.just(UTC)),
    jitter_ms=st.integers(min_value=1, max_value=86_400_000),
)
def test_jitter__the_same_tick_gets_the_same_delay_inside_the_range(name, nominal, jitter_ms):
    delay = jitter_delay(name, nominal, jitter_ms)
    assert delay == jitter_delay(name, nominal, jitter_ms)
    assert timedelta() <= delay < timedelta(milliseconds=jitter_ms)


def test_jitter__spreads_ticks_and_none_is_no_delay():
    delays = {jitter_delay("s", NOW + timedelta(minutes=m), 60_000) for m in range(100)}
    assert len(delays) > 90
    assert jitter_delay("s", NOW, None) == timedelta()


def hourly(count: int, last: datetime) -> list[datetime]:
    return [last - HOUR * (count - 1 - i) for i in range(count)]


def test_catch_up__an_on_time_tick_starts_whatever_the_rule():
    for rule in ("latest", "all", "none"):
        assert ticks_to_start(
            [NOW], NOW + timedelta(seconds=1), catch_up=rule, window=HOUR, catch_up_max=5
        ) == [True]


def test_catch_up__latest_starts_only_the_newest_inside_the_window():
    due = hourly(5, NOW - timedelta(minutes=10))
    assert ticks_to_start(due, NOW, catch_up="latest", window=3 * HOUR, catch_up_max=100) == [
        False,
        False,
        False,
        False,
        True,
    ]


def test_catch_up__all_starts_each_inside_the_window_up_to_the_cap():
    due = hourly(6, NOW - timedelta(minutes=10))
    started = ticks_to_start(due, NOW, catch_up="all", window=4 * HOUR, catch_up_max=3)
    assert started == [False, False, False, True, True, True]
    started = ticks_to_start(due, NOW, catch_up="all", window=4 * HOUR, catch_up_max=100)
    assert started == [False, False, True, True, True, True]


def test_catch_up__none_misses_every_late_tick():
    due = hourly(3, NOW - timedelta(minutes=10))
    assert (
        ticks_to_start(due, NOW, catch_up="none", window=4 * HOUR, catch_up_max=10) == [False] * 3
    )


def test_catch_up__ticks_older_than_the_window_are_missed():
    due = hourly(3, NOW - 5 * HOUR)
    assert ticks_to_start(due, NOW, catch_up="latest", window=HOUR, catch_up_max=10) == [False] * 3
