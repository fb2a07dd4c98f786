"""A schedule's definition, checked whole: every problem of every field listed in one
InvalidInput, before anything is written (the admin shows them as field errors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from ..durations import parse_duration
from ..exceptions import InvalidInput
from ..serialization import NotStorableJson, round_trip
from ..validation import NAME_MAX_LENGTH, REASON_MAX_LENGTH, text_problem
from .choices import CatchUp, Overlap
from .fire_times import FireRule

CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
MIN_EVERY_MS = 1000
# The longest a catch-up window or a jitter may be.
MAX_WINDOW_MS = 366 * 86_400_000

DEFAULTS: dict[str, Any] = {
    "cron": None,
    "every": None,
    "timezone": "UTC",
    "input": None,
    "overlap": Overlap.SKIP.value,
    "catch_up": CatchUp.LATEST.value,
    "catch_up_window": "1h",
    "catch_up_max": 100,
    "jitter": None,
    "start_at": None,
    "end_at": None,
    "paused": False,
    "pause_on_failure": False,
}


@dataclass(frozen=True)
class ScheduleSpec:
    """A checked schedule definition: durations in ms, times aware, input its JSON round trip."""

    name: str
    workflow: str
    cron: str | None
    every_ms: int | None
    timezone: str
    input: Any
    overlap: str
    catch_up: str
    catch_up_window_ms: int
    catch_up_max: int
    jitter_ms: int | None
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    pause_on_failure: bool

    @property
    def rule(self) -> FireRule:
        return FireRule(self.cron, self.every_ms, self.timezone, self.start_at, self.end_at)

    def fields(self) -> dict[str, Any]:
        """The definition as the keyword arguments `parse_schedule` takes."""
        return {
            "cron": self.cron,
            "every": self.every_ms,
            "timezone": self.timezone,
            "input": self.input,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "catch_up_window": self.catch_up_window_ms,
            "catch_up_max": self.catch_up_max,
            "jitter": self.jitter_ms,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "paused": self.paused,
            "pause_on_failure": self.pause_on_failure,
        }


class _Problems:
    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.by_field.setdefault(field, []).append(message)

    def check(self, field: str, parse: Any, *args: Any) -> Any:
        try:
            return parse(*args)
        except InvalidInput as exc:
            self.add(field, exc.message)
            return None


class ScheduleInvalid(InvalidInput):
    """A schedule's definition has problems; `fields` maps each field to its problems."""

    def __init__(self, name: str, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        problems = [f"{field}: {message}" for field, items in fields.items() for message in items]
        super().__init__(
            "\n".join([f"Schedule {name!r} is not valid:", *(f"- {p}" for p in problems)]),
            problems=problems,
        )


def parse_schedule(
    name: Any, workflow: Any, fields: Mapping[str, Any], *, workflow_exists: Any = None
) -> ScheduleSpec:
    """The checked definition of the schedule `name` starting `workflow` with `fields` (the
    keyword arguments of `create_schedule`; missing ones take their defaults). Raise
    ScheduleInvalid listing every problem. `workflow_exists(name) -> bool` checks the
    workflow when given."""
    problems = _Problems()
    values = {**DEFAULTS, **fields}
    for unknown in sorted(set(fields) - set(DEFAULTS)):
        problems.add(unknown, f"unknown field (known: {', '.join(DEFAULTS)})")
    problems.check("name", _text, name, "name")
    problems.check("workflow", _text, workflow, "workflow")
    if isinstance(workflow, str) and workflow_exists is not None and not workflow_exists(workflow):
        problems.add("workflow", f"no workflow is registered under the name {workflow!r}")
    rule_fields = _parse_rule_fields(values, problems)
    spec_values = {
        "input": problems.check("input", _input, values["input"]),
        "overlap": problems.check("overlap", _choice, values["overlap"], Overlap, "overlap"),
        "catch_up": problems.check("catch_up", _choice, values["catch_up"], CatchUp, "catch_up"),
        "catch_up_window_ms": problems.check(
            "catch_up_window", _window, values["catch_up_window"], "catch_up_window"
        ),
        "catch_up_max": problems.check("catch_up_max", _count, values["catch_up_max"]),
        "jitter_ms": problems.check("jitter", _jitter, values["jitter"]),
        "paused": problems.check("paused", _flag, values["paused"], "paused"),
        "pause_on_failure": problems.check(
            "pause_on_failure", _flag, values["pause_on_failure"], "pause_on_failure"
        ),
    }
    if problems.by_field:
        raise ScheduleInvalid(str(name), problems.by_field)
    return ScheduleSpec(name=name, workflow=workflow, **rule_fields, **spec_values)


def parse_fire_rule(
    *,
    cron: Any = None,
    every: Any = None,
    timezone: Any = "UTC",
    start_at: Any = None,
    end_at: Any = None,
) -> FireRule:
    """The checked fire rule of these fields (what `next_fire_times` takes)."""
    problems = _Problems()
    values = {"cron": cron, "every": every, "timezone": timezone}
    parsed = _parse_rule_fields({**values, "start_at": start_at, "end_at": end_at}, problems)
    if problems.by_field:
        raise ScheduleInvalid("(preview)", problems.by_field)
    return FireRule(
        parsed["cron"], parsed["every_ms"], parsed["timezone"], parsed["start_at"], parsed["end_at"]
    )


def _parse_rule_fields(values: Mapping[str, Any], problems: _Problems) -> dict[str, Any]:
    cron, every = values["cron"], values["every"]
    if (cron is None) == (every is None):
        which = "both" if cron is not None else "neither"
        problems.add("cron", f"give exactly one of cron and every, not {which}")
    start_at = problems.check("start_at", _moment, values["start_at"], "start_at")
    end_at = problems.check("end_at", _moment, values["end_at"], "end_at")
    if start_at is not None and end_at is not None and end_at <= start_at:
        problems.add("end_at", f"end_at ({end_at.isoformat()}) is not after start_at")
    return {
        "cron": problems.check("cron", _cron, cron) if cron is not None else None,
        "every_ms": problems.check("every", _every, every) if every is not None else None,
        "timezone": problems.check("timezone", _zone, values["timezone"]),
        "start_at": start_at,
        "end_at": end_at,
    }


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"the {what} must be a non-empty string, not {value!r:.80}")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidInput(f"the {what} is {len(value)} characters; at most {NAME_MAX_LENGTH}")
    problem = text_problem(value)
    if problem:
        raise InvalidInput(f"the {what} {problem}")
    return value


def _cron(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"cron must be a string, not {type(value).__name__}")
    fields = value.split()
    if len(fields) != len(CRON_FIELDS):
        raise InvalidInput(
            f"cron {value!r} has {len(fields)} fields; it takes 5 ({' '.join(CRON_FIELDS)})"
        )
    try:
        CronSim(value, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise InvalidInput(f"cron {value!r} is not valid: {exc}") from exc
    return " ".join(fields)


def _every(value: Any) -> int:
    milliseconds = parse_duration(value, what="every")
    if milliseconds < MIN_EVERY_MS:
        raise InvalidInput(f"every must be at least 1s, not {value!r}")
    return milliseconds


def _zone(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(
            f"timezone must be an IANA zone name such as 'Europe/Helsinki', not {value!r:.60}"
        )
    try:
        ZoneInfo(value)
    except (ValueError, KeyError, OSError):
        raise InvalidInput(
            f"unknown time zone {value!r}: give an IANA name such as 'Europe/Helsinki'"
        ) from None
    return value


def _moment(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{what} {value!r:.60} is not an ISO 8601 date-time") from None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be an aware datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be an aware datetime (with a time zone)")
    return value


def _input(value: Any) -> Any:
    try:
        return round_trip(value, name="input")
    except NotStorableJson as exc:
        raise InvalidInput(f"the input is not storable JSON: {exc}") from exc


def _choice(value: Any, choices: Any, what: str) -> str:
    if value not in choices.values:
        raise InvalidInput(f"{what} must be one of {', '.join(choices.values)}, not {value!r:.60}")
    return str(value)


def _window(value: Any, what: str) -> int:
    return parse_duration(value, what=what, limit_ms=MAX_WINDOW_MS)


def _jitter(value: Any) -> int | None:
    if value is None:
        return None
    milliseconds = parse_duration(value, what="jitter", limit_ms=MAX_WINDOW_MS)
    return milliseconds or None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"catch_up_max must be a whole number, 0 or more, not {value!r:.60}")
    return value


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{what} must be True or False, not {value!r:.60}")
    return value


def checked_note(note: Any) -> str:
    """A pause note: text up to REASON_MAX_LENGTH."""
    if not isinstance(note, str) or len(note) > REASON_MAX_LENGTH or text_problem(note):
        raise InvalidInput(f"note must be text of at most {REASON_MAX_LENGTH} characters")
    return note


def every_text(every_ms: int | None) -> str | None:
    """An interval as the shortest duration string that says it exactly ("90s", "1d")."""
    if every_ms is None:
        return None
    for unit, size in (
        ("w", 604_800_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ):
        if every_ms % size == 0:
            return f"{every_ms // size}{unit}"
    return f"{every_ms}ms"
