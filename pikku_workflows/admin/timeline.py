"""The run page's timeline chart: one lane per step, one bar per attempt, split by phase.

Pure geometry from the attempt history's timestamps (no queries); the template draws the bars
as positioned HTML boxes, so the chart needs no JavaScript and works offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone

from ..status import HISTORY_TIMESTAMP, StepStatus
from .display import format_duration

MIN_SPAN = timedelta(milliseconds=1)
TICKS = 4
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


class Attempt(Protocol):
    """What the chart reads of one attempt (a `WorkflowStepHistory` row)."""

    attempt: int
    created_at: datetime
    scheduled_at: datetime | None
    running_at: datetime | None
    waiting_at: datetime | None
    succeeded_at: datetime | None
    failed_at: datetime | None


@dataclass
class Bar:
    phase: str  # queued | running | waiting | between (attempts: a backoff or a failed run)
    outcome: str  # succeeded | failed | live | "" (not the attempt's last phase)
    left: str  # percentages, formatted for CSS whatever the locale
    width: str
    title: str


@dataclass
class Lane:
    step_key: str
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Mark:
    left: str
    label: str
    title: str


@dataclass
class Chart:
    lanes: list[Lane]
    ticks: list[Mark]
    marks: list[Mark]
    span: str


class _Scale:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.span = max(end - start, MIN_SPAN)

    def at(self, moment: datetime) -> float:
        return min(max((moment - self.start) / self.span * 100, 0.0), 100.0)

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
) -> Chart:
    """The chart of a run from `start` to `end`: `steps` are (step key, its attempts in order);
    `marks` are (moment, label, tooltip) drawn as vertical lines (operator actions).

    An attempt with no outcome ends at `end`, drawn as still going when the run is `live`.
    """
    scale = _Scale(start, end)
    lanes = []
    for step_key, attempts in steps:
        lane = Lane(step_key)
        previous_end: datetime | None = None
        for attempt in attempts:
            if previous_end is not None and attempt.created_at > previous_end:
                gap = format_duration(attempt.created_at - previous_end)
                title = f"{step_key}: between attempts {attempt.attempt - 1} and {attempt.attempt} ({gap})"
                lane.bars.append(
                    scale.bar(
                        previous_end, attempt.created_at, phase="between", outcome="", title=title
                    )
                )
            bars, previous_end = _attempt_bars(scale, step_key, attempt, end, live)
            lane.bars.extend(bars)
        lanes.append(lane)
    return Chart(
        lanes=lanes,
        ticks=_ticks(scale),
        marks=[Mark(_percent(scale.at(at)), label, title) for at, label, title in marks],
        span=format_duration(scale.span),
    )


def _attempt_bars(
    scale: _Scale, step_key: str, attempt: Attempt, end: datetime, live: bool
) -> tuple[list[Bar], datetime]:
    starts = sorted(
        ((moment, phase) for name, phase in PHASE_STARTS if (moment := getattr(attempt, name))),
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
    stop = finished or max(end, phases[-1][0])
    bars = []
    for index, (begin, phase) in enumerate(phases):
        last = index == len(phases) - 1
        until = stop if last else phases[index + 1][0]
        title = (
            f"{step_key} · attempt {attempt.attempt} · {phase} "
            f"{_clock(begin)} → {_clock(until)} ({format_duration(until - begin)})"
        )
        if last and outcome:
            title += f" · {outcome}"
        bars.append(
            scale.bar(begin, until, phase=phase, outcome=outcome if last else "", title=title)
        )
    return bars, stop


def _ticks(scale: _Scale) -> list[Mark]:
    ticks = []
    for index in range(TICKS + 1):
        offset = scale.span * index / TICKS
        label = "0" if index == 0 else f"+{format_duration(offset)}"
        ticks.append(Mark(_percent(index * 100 / TICKS), label, _clock(scale.start + offset)))
    return ticks


def _percent(value: float) -> str:
    return f"{value:.3f}"


def _clock(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M:%S.%f")[:-3]
