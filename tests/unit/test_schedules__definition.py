"""A schedule's definition is checked whole: every problem listed at once, by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.schedules.spec import ScheduleInvalid, parse_schedule

START = datetime(2026, 1, 1, tzinfo=UTC)


def problems_of(**fields) -> dict[str, list[str]]:
    with pytest.raises(ScheduleInvalid) as caught:
        parse_schedule("nightly", "report", fields, workflow_exists=lambda name: name == "report")
    return caught.value.fields


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "61 * * * *"}, "cron", "Bad minute"),
        ({"cron": "0 0 * * * *"}, "cron", "has 6 fields"),
        ({"cron": "0 2 * *"}, "cron", "has 4 fields"),
        ({"cron": "0 2 * * *", "timezone": "Europe/Atlantis"}, "timezone", "unknown time zone"),
        ({"every": 0}, "every", "at least 1s"),
        ({"every": "-5s"}, "every", "Invalid duration"),
        ({"cron": "0 2 * * *", "every": "1h"}, "cron", "not both"),
        ({}, "cron", "not neither"),
        ({"cron": "0 2 * * *", "catch_up_max": -1}, "catch_up_max", "0 or more"),
        ({"cron": "0 2 * * *", "overlap": "sometimes"}, "overlap", "must be one of"),
        ({"cron": "0 2 * * *", "catch_up": "most"}, "catch_up", "must be one of"),
        ({"cron": "0 2 * * *", "start_at": datetime(2026, 1, 1)}, "start_at", "aware"),
        (
            {"cron": "0 2 * * *", "start_at": START, "end_at": START - timedelta(days=1)},
            "end_at",
            "not after start_at",
        ),
        ({"cron": "0 2 * * *", "input": {"x": float("nan")}}, "input", "not storable"),
        ({"cron": "0 2 * * *", "wat": 1}, "wat", "unknown field"),
    ],
)
def test_definition__each_bad_field_is_named(fields, field, says):
    found = problems_of(**fields)
    assert any(says in message for message in found[field]), found


@pytest.mark.parametrize(
    "overlap", ["skip", "allow_all", "cancel_other", "buffer_one", "buffer_all"]
)
def test_definition__every_overlap_is_accepted(overlap):
    spec = parse_schedule("nightly", "report", {"cron": "0 2 * * *", "overlap": overlap})
    assert spec.overlap == overlap


def test_definition__every_problem_is_listed_at_once():
    with pytest.raises(ScheduleInvalid) as caught:
        parse_schedule(
            "nightly",
            "no_such_workflow",
            {
                "cron": "61 * * * *",
                "timezone": "Nowhere/Special",
                "catch_up_max": -3,
                "start_at": START,
                "end_at": START,
            },
            workflow_exists=lambda name: False,
        )
    assert set(caught.value.fields) == {"workflow", "cron", "timezone", "catch_up_max", "end_at"}
    assert isinstance(caught.value, pw.InvalidInput)
    assert len(caught.value.problems) == 5


def test_definition__a_good_one_parses_durations_and_keeps_the_rest():
    spec = parse_schedule(
        "nightly",
        "report",
        {"every": "90m", "jitter": "30s", "catch_up_window": "2h", "input": {"full": True}},
    )
    assert (spec.every_ms, spec.jitter_ms, spec.catch_up_window_ms) == (
        5_400_000,
        30_000,
        7_200_000,
    )
    assert spec.cron is None and spec.input == {"full": True} and spec.overlap == "skip"


def test_declared_schedule__is_checked_when_its_workflow_registers():
    with pytest.raises(pw.InvalidInput, match="has 6 fields"):

        @pw.workflow("badly_scheduled", schedule=pw.Schedule(cron="0 0 2 * * *"))
        def badly_scheduled(wf, input):
            return None


def test_declared_schedule__two_workflows_may_not_share_a_schedule_name():
    @pw.workflow("first_scheduled", schedule=pw.Schedule(cron="0 2 * * *", name="nightly"))
    def first(wf, input):
        return None

    with pytest.raises(pw.InvalidInput, match="declared by workflows"):

        @pw.workflow("second_scheduled", schedule=pw.Schedule(cron="0 3 * * *", name="nightly"))
        def second(wf, input):
            return None


def test_next_fire_times__counts_from_after_and_keeps_start_and_end():
    after = datetime(2026, 5, 1, 12, tzinfo=UTC)
    times = pw.next_fire_times(
        every="1h",
        after=after,
        count=5,
        start_at=after + timedelta(hours=2, minutes=30),
        end_at=after + timedelta(hours=5),
    )
    assert times == [
        after + timedelta(hours=2, minutes=30),
        after + timedelta(hours=3, minutes=30),
        after + timedelta(hours=4, minutes=30),
    ]


def test_next_fire_times__a_naive_after_is_refused():
    with pytest.raises(pw.InvalidInput, match="aware"):
        pw.next_fire_times(cron="0 2 * * *", after=datetime(2026, 1, 1))


def test_next_fire_times__every_anchors_at_the_epoch_without_start_at():
    after = datetime(2026, 5, 1, 12, 7, tzinfo=UTC)
    assert pw.next_fire_times(every="15m", after=after, count=2) == [
        datetime(2026, 5, 1, 12, 15, tzinfo=UTC),
        datetime(2026, 5, 1, 12, 30, tzinfo=UTC),
    ]
