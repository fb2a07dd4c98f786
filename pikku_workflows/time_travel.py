"""The pure half of the timeline (no queries): the event log's rows as timeline events, and the
fold of those events into the run's state at any point (`reconstruct_run_state`).

Event keys: every event has `seq, at, step_key, attempt, event`; `pending` adds
`from_step_key`, `succeeded` adds `result`, `failed` adds `error`, an operator action adds `user`
(its `step_key` and `attempt` are null). No other keys, and each only where named here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils import dateparse, timezone

from .exceptions import InvalidInput
from .status import StepStatus

OUTCOME_EVENTS = {StepStatus.SUCCEEDED: "result", StepStatus.FAILED: "error"}

IN_FLIGHT = frozenset({"pending", "scheduled", "running"})
HALTING_ACTIONS = frozenset({"cancel", "suspend"})
RESTARTING_ACTIONS = frozenset({"resume", "retry"})

PHASES = ("pending", "running", "waiting", "failed", "completed", "idle")

# What a timeline event of an attempt reads from the attempt's rows: (step_key, attempt) ->
# {from_step_key, result, error}.
Attempts = Mapping[tuple[str, int], Mapping[str, Any]]


def build_timeline(rows: Iterable[Mapping[str, Any]], attempts: Attempts) -> list[dict[str, Any]]:
    """The event log's rows (`seq, at, step_key, attempt, event, user`, in seq order) as
    timeline events: a pending event adds its step's `from_step_key`, an outcome its attempt's
    `result` or `error`, an operator action (no step) its `user`."""
    return [_timeline_event(row, attempts) for row in rows]


def _timeline_event(row: Mapping[str, Any], attempts: Attempts) -> dict[str, Any]:
    event = {
        "seq": row["seq"],
        "at": row["at"].isoformat(),
        "step_key": row["step_key"],
        "attempt": row["attempt"],
        "event": row["event"],
    }
    if row["step_key"] is None:
        return {**event, "user": row["user"]}
    recorded = attempts.get((row["step_key"], row["attempt"]), {})
    if row["event"] == StepStatus.PENDING:
        event["from_step_key"] = recorded.get("from_step_key")
    elif row["event"] in OUTCOME_EVENTS:
        value = OUTCOME_EVENTS[row["event"]]
        event[value] = recorded.get(value)
    return event


def resolve_seq(events: Sequence[Mapping[str, Any]], at: Any = None) -> int:
    """The seq of the last event at or before `at` (a seq, a datetime, or either as a string);
    -1 means before the first event. Default: the last event."""
    if at is None:
        return len(events) - 1
    if isinstance(at, str):
        return resolve_seq(events, _parse_point(at))
    if isinstance(at, bool) or not isinstance(at, int | datetime):
        raise InvalidInput(f"`at` must be a seq or a datetime, not {at!r}.")
    if isinstance(at, int):
        if not -1 <= at < len(events):
            raise InvalidInput(
                f"`at` seq {at} is outside this run's timeline (-1..{len(events) - 1})."
            )
        return at
    if timezone.is_naive(at):
        at = timezone.make_aware(at)
    times = [datetime.fromisoformat(event["at"]) for event in events]
    return bisect_right(times, at) - 1


def _parse_point(text: str) -> int | datetime:
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        try:
            return int(stripped)
        except ValueError:  # digits int() refuses: superscripts, more than Python's limit
            raise InvalidInput(
                f"`at` must be a seq or an ISO 8601 datetime, not {text!r}."
            ) from None
    try:
        parsed = dateparse.parse_datetime(stripped)
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidInput(f"`at` must be a seq or an ISO 8601 datetime, not {text!r}.")
    return parsed


def state_at(
    events: Sequence[Mapping[str, Any]], at: Any = None, *, run_status: str | None = None
) -> dict[str, Any]:
    """Fold the events up to `at` (inclusive) into `{seq, at, phase, steps, path, results}`.

    `run_status` is the run's status now. A `completed` or `failed` run shows that phase from
    its last step event on (only operator actions, such as a fork, can follow its end). A
    `cancelled` or `suspended` run is `idle` at its last event: an operator's cancel or suspend
    is on the timeline itself, but `wf.suspend` and RPC_NOT_FOUND suspend without an action.
    """
    seq = resolve_seq(events, at)
    steps: dict[str, dict[str, Any]] = {}
    path: list[str] = []
    halted = False
    last_step_event: str | None = None
    for event in events[: seq + 1]:
        if event["step_key"] is None:
            halted = _halted_after(event["event"], halted)
        elif _apply(steps, path, event):
            last_step_event = event["event"]
    return {
        "seq": seq,
        "at": events[seq]["at"] if seq >= 0 else None,
        "phase": _phase(
            seq, steps, halted, last_step_event, _final_status(events, seq, run_status)
        ),
        "steps": steps,
        "path": path,
        "results": {
            key: steps[key]["result"] for key in path if steps[key]["status"] == "succeeded"
        },
    }


def _final_status(
    events: Sequence[Mapping[str, Any]], seq: int, run_status: str | None
) -> str | None:
    """The run's current status when it already held at `seq`, else None."""
    if run_status in ("completed", "failed"):
        ended = not any(event["step_key"] is not None for event in events[seq + 1 :])
        return run_status if ended else None
    if run_status in ("cancelled", "suspended"):
        return run_status if seq == len(events) - 1 else None
    return None


def _halted_after(action: str, halted: bool) -> bool:
    if action in HALTING_ACTIONS:
        return True
    if action in RESTARTING_ACTIONS:
        return False
    return halted  # approvals, signals, forks: the run's course is the steps' business


def _apply(steps: dict[str, dict[str, Any]], path: list[str], event: Mapping[str, Any]) -> bool:
    """Apply one step event; False (nothing changed) when the event is stale."""
    key, attempt, name = event["step_key"], event["attempt"], event["event"]
    step = steps.get(key)
    if step is None:
        path.append(key)
        step = steps[key] = {"status": None, "attempt": attempt, "result": None, "error": None}
    elif _stale(step, attempt, name):
        return False
    if attempt > step["attempt"] or name == "pending":
        # A new attempt (or a retry reopening the step) starts with nothing recorded.
        step.update(attempt=attempt, result=None, error=None)
    step["status"] = name
    if name == "succeeded":
        step.update(result=event.get("result"), error=None)
    elif name == "failed":
        step.update(result=None, error=event.get("error"))
    return True


def _stale(step: Mapping[str, Any], attempt: int, name: str) -> bool:
    """An older attempt's event, or a progress event of an attempt that already ended: clocks
    of different processes can order those after the outcome they preceded."""
    if attempt != step["attempt"]:
        return attempt < step["attempt"]
    return step["status"] in OUTCOME_EVENTS and name not in OUTCOME_EVENTS


def _phase(
    seq: int,
    steps: Mapping[str, Mapping[str, Any]],
    halted: bool,
    last_step_event: str | None,
    final_status: str | None,
) -> str:
    """pending before anything happened; the run's own end once nothing follows; otherwise
    running (a step in flight), waiting (parked on an approval, signal or child), failed (the
    latest step event is a failure, e.g. between attempts) or idle (between steps, or halted
    by an operator)."""
    if seq < 0:
        return "pending"
    if final_status in ("completed", "failed"):
        return final_status
    if halted or final_status in ("cancelled", "suspended"):
        return "idle"
    statuses = {step["status"] for step in steps.values()}
    if statuses & IN_FLIGHT:
        return "running"
    if "waiting" in statuses:
        return "waiting"
    return "failed" if last_step_event == "failed" else "idle"
