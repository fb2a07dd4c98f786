"""Rates parsed and checked, and the GCRA arithmetic that spaces starts (pure: no database)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.flow.rates import ParsedRate, parse_rate, schedule_start


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10/s", (10, 1_000)),
        ("600/m", (600, 60_000)),
        ("5/h", (5, 3_600_000)),
        ("1/d", (1, 86_400_000)),
    ],
)
def test_parse_rate__counts_per_period(text, expected):
    rate = parse_rate(text)
    assert (rate.count, rate.period_ms) == expected


@pytest.mark.parametrize("text", ["10/x", "0/s", "ten/s", "10", "10/ s", "-1/s", 10, None])
def test_parse_rate__anything_else_is_invalid_input_showing_the_form(text):
    with pytest.raises(pw.InvalidInput, match='must look like "10/s"'):
        parse_rate(text)


@pytest.mark.parametrize("burst", [-1, 1.5, True, "5"])
def test_parse_rate__a_burst_that_is_not_a_whole_number_from_0_is_invalid_input(burst):
    with pytest.raises(pw.InvalidInput, match="burst"):
        parse_rate("10/s", burst=burst)


def test_schedule_start__a_burst_begins_at_once_then_starts_follow_the_steady_spacing():
    rate = ParsedRate(10, 1_000, burst=5)
    tat, begins = None, []
    for _ in range(10):
        begun, tat = schedule_start(rate, tat, now_ms=0)
        begins.append(begun)

    assert begins == [0, 0, 0, 0, 0, 0, 100, 200, 300, 400]


def test_schedule_start__over_any_window_of_the_period_at_most_count_plus_burst_begin():
    rate = ParsedRate(10, 1_000, burst=5)
    tat, begins = None, []
    for arrival in range(0, 3_000, 20):  # a start every 20 ms, five times the rate
        begun, tat = schedule_start(rate, tat, now_ms=arrival)
        begins.append(begun)

    for start in range(0, 3_000, 10):
        assert sum(start <= at < start + 1_000 for at in begins) <= 15


def test_schedule_start__a_quiet_spell_restores_the_burst():
    rate = ParsedRate(10, 1_000, burst=2)
    _, tat = schedule_start(rate, None, now_ms=0)

    begun, _ = schedule_start(rate, tat, now_ms=10_000)

    assert begun == 10_000
