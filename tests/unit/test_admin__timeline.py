"""The timeline chart's geometry: bars per attempt phase, in percent of the run's span."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pikku_workflows.admin.timeline import build_chart

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Attempt:
    attempt: int
    created_at: datetime
    scheduled_at: datetime | None = None
    running_at: datetime | None = None
    waiting_at: datetime | None = None
    succeeded_at: datetime | None = None
    failed_at: datetime | None = None
    error: dict | None = None


def test_a_failed_attempt_then_a_retry_that_succeeds():
    attempts = [
        Attempt(1, created_at=at(0), running_at=at(10), failed_at=at(20)),
        Attempt(2, created_at=at(50), running_at=at(50), succeeded_at=at(100)),
    ]

    chart = build_chart(at(0), at(100), [("charge", attempts)])

    [lane] = chart.lanes
    bars = [(bar.phase, bar.outcome, bar.left, bar.width) for bar in lane.bars]
    assert bars == [
        ("queued", "", "0.000", "10.000"),
        ("running", "failed", "10.000", "10.000"),
        ("between", "", "20.000", "30.000"),
        ("running", "succeeded", "50.000", "50.000"),
    ]
    assert lane.bars[1].title.startswith("charge · attempt 1 · running 12:00:10.000 → 12:00:20.000")
    assert lane.bars[1].title.endswith("(10 s) · failed")
    assert chart.span == "1 min 40 s"
    assert [tick.label for tick in chart.ticks] == [
        "0",
        "+25 s",
        "+50 s",
        "+1 min 15 s",
        "+1 min 40 s",
    ]


def test_pending_then_scheduled_is_one_queued_bar_and_waiting_is_its_own_phase():
    attempts = [
        Attempt(
            1,
            created_at=at(0),
            scheduled_at=at(2),
            running_at=at(4),
            waiting_at=at(6),
            succeeded_at=at(10),
        )
    ]

    [lane] = build_chart(at(0), at(10), [("invoice", attempts)]).lanes

    assert [(bar.phase, bar.outcome, bar.left, bar.width) for bar in lane.bars] == [
        ("queued", "", "0.000", "40.000"),
        ("running", "", "40.000", "20.000"),
        ("waiting", "succeeded", "60.000", "40.000"),
    ]


def test_an_attempt_still_going_reaches_the_end_and_is_live_while_the_run_is():
    attempts = [Attempt(1, created_at=at(0), running_at=at(5))]

    live = build_chart(at(0), at(20), [("ship", attempts)], live=True).lanes[0].bars[-1]
    ended = build_chart(at(0), at(20), [("ship", attempts)], live=False).lanes[0].bars[-1]

    assert (live.outcome, live.left, live.width) == ("live", "25.000", "75.000")
    assert ended.outcome == ""


def test_marks_and_clamping():
    attempts = [Attempt(1, created_at=at(-5), running_at=at(-5), succeeded_at=at(30))]

    chart = build_chart(
        at(0), at(20), [("early", attempts)], [(at(5), "retry", "retry by ada: fixed")]
    )

    [bar] = chart.lanes[0].bars
    assert (bar.left, bar.width) == ("0.000", "100.000")
    [mark] = chart.marks
    assert (mark.left, mark.label, mark.title) == ("25.000", "retry", "retry by ada: fixed")


def test_a_run_with_no_duration_does_not_divide_by_zero():
    attempts = [Attempt(1, created_at=at(0), running_at=at(0), succeeded_at=at(0))]

    [bar] = build_chart(at(0), at(0), [("instant", attempts)]).lanes[0].bars

    assert (bar.left, bar.width) == ("0.000", "0.000")  # CSS gives it a minimum width


def test_a_sleep_is_waiting_not_queued_and_a_live_one_keeps_its_colour():
    sleeping = [Attempt(1, created_at=at(0), scheduled_at=at(0))]

    chart = build_chart(at(0), at(10), [("cool-off", sleeping)], live=True, timers={"cool-off"})
    [bar] = chart.lanes[0].bars

    # The phase gives the colour; "live" only adds the stripes.
    assert (bar.phase, bar.outcome) == ("waiting", "live")
    assert "waiting (timer)" in bar.title


def test_a_run_retried_hours_later_gets_a_broken_axis_and_stays_readable():
    attempts = [
        Attempt(1, created_at=at(0), running_at=at(1), failed_at=at(10)),
        # An operator retried it three hours later.
        Attempt(2, created_at=at(10_800), running_at=at(10_801), succeeded_at=at(10_810)),
    ]

    chart = build_chart(
        at(0), at(10_810), [("charge", attempts)], [(at(10_800), "retry", "retry by ops")]
    )

    [gap] = chart.breaks
    assert (gap.left, gap.width) == ("48.000", "4.000")
    assert gap.title.startswith("2 h 59 min with nothing happening")
    bars = {(bar.phase, bar.outcome): bar for bar in chart.lanes[0].bars}
    # Both attempts are wide enough to read, not squashed into a pixel at each end.
    assert float(bars[("running", "failed")].width) > 40
    assert float(bars[("running", "succeeded")].width) > 40
    # The retry is drawn after the break; the ticks mark the break's two sides.
    assert float(chart.marks[0].left) == 52.0
    # The break's near side is too close to its far side to print both: the far side stays.
    assert [tick.label for tick in chart.ticks] == ["0", "+3 h"]
    assert chart.ticks[1].left == "52.000"


def test_a_short_gap_keeps_a_linear_axis():
    attempts = [
        Attempt(1, created_at=at(0), running_at=at(0), failed_at=at(10)),
        Attempt(2, created_at=at(40), running_at=at(40), succeeded_at=at(100)),
    ]

    chart = build_chart(at(0), at(100), [("charge", attempts)])

    assert chart.breaks == []
    assert [tick.label for tick in chart.ticks][-1] == "+1 min 40 s"


def test_an_attempt_whose_worker_went_silent_ends_where_its_lease_lapsed():
    """A killed worker's attempt is one bar ending, dashed, at its lease's lapse; recovery's
    new attempt is another bar after a visible break."""
    lapse = {"code": "STEP_LEASE_EXPIRED", "message": "Step 'charge' attempt 1: lease lapsed"}
    attempts = [
        Attempt(1, created_at=at(0), running_at=at(0), failed_at=at(60), error=lapse),
        Attempt(2, created_at=at(70), running_at=at(70), succeeded_at=at(100)),
    ]

    chart = build_chart(at(0), at(100), [("charge", attempts)])

    [lane] = chart.lanes
    bars = [(bar.phase, bar.outcome, bar.left, bar.width) for bar in lane.bars]
    assert bars == [
        ("running", "lapsed", "0.000", "60.000"),
        ("between", "", "60.000", "10.000"),
        ("running", "succeeded", "70.000", "30.000"),
    ]
    assert lane.bars[0].title.endswith("· lease lapsed (its worker went silent)")
