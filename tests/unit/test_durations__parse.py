from __future__ import annotations

import pytest

from pikku_workflows.durations import parse_duration
from pikku_workflows.exceptions import InvalidInput


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("500ms", 500),
        ("10s", 10_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1w", 604_800_000),
        ("0s", 0),
        (" 3s ", 3_000),
    ],
)
def test_parse_duration__units(text, expected_ms):
    assert parse_duration(text) == expected_ms


@pytest.mark.parametrize("value", [0, 1, 250, 86_400_000])
def test_parse_duration__int_is_milliseconds(value):
    assert parse_duration(value) == value


@pytest.mark.parametrize("value", [True, False])
def test_parse_duration__bool_rejected(value):
    with pytest.raises(InvalidInput):
        parse_duration(value)


@pytest.mark.parametrize("value", [-1, -1000, "-5s"])
def test_parse_duration__negative_rejected(value):
    with pytest.raises(InvalidInput):
        parse_duration(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "10",
        "s",
        "10x",
        "10 s",
        "1.5s",
        "10S",
        "5min",
        "10s10s",
        "ten seconds",
        "exponential",
        "\uff15s",  # a fullwidth digit five: only ASCII digits are a duration
        "\u0665s",  # an Arabic-Indic digit five
        1.5,
        None,
        [10],
        {"s": 10},
    ],
)
def test_parse_duration__garbage_rejected(value):
    with pytest.raises(InvalidInput):
        parse_duration(value)


def test_parse_duration__error_is_a_workflow_error_with_code():
    with pytest.raises(InvalidInput) as caught:
        parse_duration("soon")
    assert caught.value.code == "INVALID_INPUT"
    assert "soon" in str(caught.value)


def test_parse_duration__a_timedelta_is_its_milliseconds():
    from datetime import timedelta

    assert parse_duration(timedelta(minutes=1, milliseconds=5)) == 60_005


@pytest.mark.parametrize("value", ["500000w", 10**20, "3651d"])
def test_parse_duration__longer_than_ten_years_is_refused(value):
    with pytest.raises(InvalidInput, match="too long"):
        parse_duration(value)


def test_parse_duration__names_what_it_parses_and_honours_its_limit():
    with pytest.raises(InvalidInput, match="The timeout '2d' is too long: at most 86400000 ms"):
        parse_duration("2d", what="timeout", limit_ms=86_400_000)
