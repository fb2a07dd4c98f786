"""The run page's timeline chart: one lane per step, one bar per attempt, split by phase.

Pure geometry from the attempt history's timestamps (no queries); the template draws the bars
as positioned HTML boxes, so the chart needs no JavaScript and works offline. A bar keeps its
phase's colour (a sleep is waiting, an attempt that ended was running); how it ended is a cap at
its end, and a bar still going is striped. Long idle stretches (a run retried hours after it
failed) are drawn as narrow breaks in the axis, so the busy parts stay readable.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone

from ..exceptions import StepLeaseExpired
from ..status import HISTORY_TIMESTAMP, StepStatus
from .display import format_duration

MIN_SPAN = timedelta(milliseconds=1)
TICKS = 4
# Ticks closer than this (percent) would print over each other.
TICK_ROOM = 8.0
# An idle stretch becomes a break when it is this long and takes this share of the run's span;
# each break is drawn this many percent wide.
BREAK_AT_LEAST = timedelta(seconds=5)
BREAK_SHARE = 0.4
BREAK_WIDTH = 4.0
# On a broken axis, each busy stretch gets at least this share of the room left: a few
# milliseconds before a break are as readable as the minutes after it.
MIN_BUSY_SHARE = 0.2
# (timestamp field, the phase that starts there), in lifecycle order.
PHASE_STARTS = (
    (HISTORY_TIMESTAMP[StepStatus.PENDING], "queued"),
    (HISTORY_TIMESTAMP[StepStatus.SCHEDULED], "queued"),
    (HISTORY_TIMESTAMP[StepStatus.RUNNING], "running"),
    (HISTORY_TIMESTAMP[StepStatus.WAITING], "waiting"),
)
OUTCOMES = (
    (HISTORY_TIMESTAMP[StepStatus.SUCCEEDED], "succeeded"),
    (HISTORY_TIMESTAMP[StepStatus.FAILED], "failed"),
)

OUTCOME_WORDS = {"lapsed": "lease lapsed (its worker went silent)", "live": "still going"}


def lease_lapsed(error: Any) -> bool:
    """Whether an attempt's error says its lease lapsed (its worker went silent)."""
    return isinstance(error, dict) and error.get("code") == StepLeaseExpired.code


class Attempt(Protocol):
    """What the chart reads of one attempt (a `WorkflowStepHistory` row)."""

    attempt: int
    created_at: datetime
    scheduled_at: datetime | None
    running_at: datetime | None
    waiting_at: datetime | None
    succeeded_at: datetime | None
    failed_at: datetime | None
    error: Any


@dataclass
class Bar:
    phase: str  # queued | running | waiting | between (attempts: a backoff or a failed run)
    outcome: str  # succeeded | failed | lapsed | live | "" (not the attempt's last phase)
    left: str  # percentages, formatted for CSS whatever the locale
    width: str
    title: str


@dataclass
class Lane:
    step_key: str
    bars: list[Bar] = field(default_factory=list)
    label: Any = ""  # how the page names the step (the engine's own keys in words)


@dataclass
class Mark:
    left: str
    label: str
    title: str


@dataclass
class Break:
    """An idle stretch of the axis, drawn narrow."""

    left: str
    width: str
    title: str


@dataclass
class Chart:
    lanes: list[Lane]
    ticks: list[Mark]
    marks: list[Mark]
    span: str
    breaks: list[Break] = field(default_factory=list)


@dataclass(frozen=True)
class _Piece:
    begin: datetime
    end: datetime
    left: float
    width: float
    idle: bool


class _Scale:
    """Moments to percent of the chart: linear, except long idle stretches (no attempt running,
    nothing happening), each squeezed into BREAK_WIDTH percent."""

    def __init__(
        self, start: datetime, end: datetime, busy: Iterable[tuple[datetime, datetime]] = ()
    ) -> None:
        self.start = start
        self.span = max(end - start, MIN_SPAN)
        self.end = start + self.span
        self.pieces = self._pieces(busy)

    def _idle(self, busy: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
        """The long stretches that no busy interval covers."""
        covered = sorted(
            (max(a, self.start), min(b, self.end))
            for a, b in busy
            if b >= self.start and a <= self.end
        )
        idle, cursor = [], self.start
        for a, b in [*covered, (self.end, self.end)]:
            if a - cursor >= BREAK_AT_LEAST and (a - cursor) / self.span >= BREAK_SHARE:
                idle.append((cursor, a))
            cursor = max(cursor, b)
        return idle

    def _pieces(self, busy: Iterable[tuple[datetime, datetime]]) -> list[_Piece]:
        """Busy and idle stretches in turn, each with its share of the chart's width."""
        idle = self._idle(busy)
        stretches: list[tuple[datetime, datetime, bool]] = []
        cursor = self.start
        for a, b in idle:
            if a > cursor:
                stretches.append((cursor, a, False))
            stretches.append((a, b, True))
            cursor = b
        if self.end > cursor or not stretches:
            stretches.append((cursor, self.end, False))
        if all(quiet for *_, quiet in stretches):
            # Nothing but waiting (a run asleep since it started): nothing to keep readable.
            return [_Piece(self.start, self.end, 0.0, 100.0, False)]
        active = sum((b - a for a, b, quiet in stretches if not quiet), timedelta(0))
        shares = [
            0.0 if quiet else max((b - a) / active if active else 1.0, MIN_BUSY_SHARE)
            for a, b, quiet in stretches
        ]
        room = (100.0 - BREAK_WIDTH * len(idle)) / sum(shares)
        pieces, left = [], 0.0
        for (a, b, quiet), share in zip(stretches, shares, strict=True):
            width = BREAK_WIDTH if quiet else room * share
            pieces.append(_Piece(a, b, left, width, quiet))
            left += width
        return pieces

    @property
    def broken(self) -> bool:
        return any(piece.idle for piece in self.pieces)

    def at(self, moment: datetime) -> float:
        if moment <= self.start:
            return 0.0
        for piece in self.pieces:
            if moment <= piece.end:
                share = (moment - piece.begin) / max(piece.end - piece.begin, MIN_SPAN)
                return min(max(piece.left + share * piece.width, 0.0), 100.0)
        return 100.0

    def bar(self, begin: datetime, end: datetime, **fields: Any) -> Bar:
        left = self.at(begin)
        return Bar(left=_percent(left), width=_percent(max(self.at(end) - left, 0.0)), **fields)


def build_chart(
    start: datetime,
    end: datetime,
    steps: Iterable[tuple[str, Sequence[Attempt]]],
    marks: Iterable[tuple[datetime, str, str]] = (),
    *,
    live: bool = False,
    timers: Collection[str] = (),
) -> Chart:
    """The chart of a run from `start` to `end`: `steps` are (step key, its attempts in order);
    `marks` are (moment, label, tooltip) drawn as vertical lines (operator actions); `timers`
    are the keys of sleep steps, whose scheduled time is waiting, not queued.

    An attempt with no outcome ends at `end`, drawn as still going when the run is `live`.
    """
    steps, marks = list(steps), list(marks)
    lanes_phases = [
        (key, [_attempt_phases(a, end, live, key in timers) for a in attempts])
        for key, attempts in steps
    ]
    # Busy: attempts running, and every moment something happened (an event, an operator).
    busy = [
        (begin, until)
        for _, phases in lanes_phases
        for segments, _ in phases
        for begin, until, phase, _ in segments
        if phase == "running"
    ]
    busy += [(m, m) for _, attempts in steps for a in attempts for m in _moments(a)]
    busy += [(at, at) for at, _, _ in marks]
    scale = _Scale(start, end, busy)
    lanes = []
    for (step_key, attempts), (_, phases) in zip(steps, lanes_phases, strict=True):
        lane = Lane(step_key)
        previous_end: datetime | None = None
        for attempt, (segments, stop) in zip(attempts, phases, strict=True):
            if previous_end is not None and attempt.created_at > previous_end:
                gap = format_duration(attempt.created_at - previous_end)
                title = f"{step_key}: between attempts {attempt.attempt - 1} and {attempt.attempt} ({gap})"
                lane.bars.append(
                    scale.bar(
                        previous_end, attempt.created_at, phase="between", outcome="", title=title
                    )
                )
            timer = step_key in timers
            lane.bars.extend(_bars(scale, step_key, attempt, segments, timer))
            previous_end = stop
        lanes.append(lane)
    return Chart(
        lanes=lanes,
        ticks=_ticks(scale),
        marks=[Mark(_percent(scale.at(at)), label, title) for at, label, title in marks],
        span=format_duration(scale.span),
        breaks=[
            Break(
                _percent(piece.left),
                _percent(piece.width),
                f"{format_duration(piece.end - piece.begin)} with nothing happening "
                f"({_clock(piece.begin)} → {_clock(piece.end)})",
            )
            for piece in scale.pieces
            if piece.idle
        ],
    )


def _moments(attempt: Attempt) -> list[datetime]:
    names = [name for name, _ in (*PHASE_STARTS, *OUTCOMES)]
    return [moment for name in names if (moment := getattr(attempt, name))]


Segment = tuple[datetime, datetime, str, str]  # begin, until, phase, outcome ("" unless last)


def _attempt_phases(
    attempt: Attempt, end: datetime, live: bool, timer: bool
) -> tuple[list[Segment], datetime]:
    """The attempt's phases in time, and when it stopped (its outcome, or `end`)."""
    starts = sorted(
        (
            (moment, "waiting" if timer and phase == "queued" else phase)
            for name, phase in PHASE_STARTS
            if (moment := getattr(attempt, name))
        ),
        key=lambda item: item[0],
    )
    phases: list[tuple[datetime, str]] = []
    for moment, phase in starts:
        if phases and phases[-1][1] == phase:
            continue  # pending then scheduled: one queued bar
        if phases and phases[-1][0] == moment:
            phases[-1] = (moment, phase)  # a phase that lasted no time at all is no bar
        else:
            phases.append((moment, phase))
    outcome, finished = next(
        ((label, moment) for name, label in OUTCOMES if (moment := getattr(attempt, name))),
        ("live" if live else "", None),
    )
    if outcome == "failed" and lease_lapsed(attempt.error):
        outcome = "lapsed"  # its worker went silent: the attempt ends where its lease lapsed
    stop = finished or max(end, phases[-1][0])
    segments = []
    for index, (begin, phase) in enumerate(phases):
        last = index == len(phases) - 1
        until = stop if last else phases[index + 1][0]
        segments.append((begin, until, phase, outcome if last else ""))
    return segments, stop


def _bars(
    scale: _Scale, step_key: str, attempt: Attempt, segments: list[Segment], timer: bool
) -> list[Bar]:
    bars = []
    for begin, until, phase, outcome in segments:
        shown = "waiting (timer)" if timer and phase == "waiting" else phase
        title = (
            f"{step_key} · attempt {attempt.attempt} · {shown} "
            f"{_clock(begin)} → {_clock(until)} ({format_duration(until - begin)})"
        )
        if outcome:
            title += f" · {OUTCOME_WORDS.get(outcome, outcome)}"
        bars.append(scale.bar(begin, until, phase=phase, outcome=outcome, title=title))
    return bars


def _ticks(scale: _Scale) -> list[Mark]:
    """Evenly spaced on a linear axis; on a broken one, at the edges of its breaks."""
    if not scale.broken:
        return [
            Mark(
                _percent(index * 100 / TICKS),
                "0" if index == 0 else f"+{format_duration(scale.span * index / TICKS)}",
                _clock(scale.start + scale.span * index / TICKS),
            )
            for index in range(TICKS + 1)
        ]
    moments = [scale.start]
    for piece in scale.pieces:
        if piece.idle:
            moments += [m for m in (piece.begin, piece.end) if m not in moments]
    if scale.end not in moments:
        moments.append(scale.end)
    ticks: list[Mark] = []
    for moment in moments:
        offset = moment - scale.start
        label = "0" if not offset else f"+{format_duration(offset)}"
        tick = Mark(_percent(scale.at(moment)), label, _clock(moment))
        if ticks and ticks[-1].label == label:
            continue  # both sides of a short busy stretch read the same
        if len(ticks) > 1 and float(tick.left) - float(ticks[-1].left) < TICK_ROOM:
            ticks[-1] = tick  # the two sides of a break: the later one says more
        else:
            ticks.append(tick)
    return ticks


def _percent(value: float) -> str:
    return f"{value:.3f}"


def _clock(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M:%S.%f")[:-3]
