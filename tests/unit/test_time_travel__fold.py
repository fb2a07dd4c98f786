"""The pure timeline: the event log's rows as timeline events, and the fold of those events into
a run's state at a point (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.time_travel import build_timeline, resolve_seq, state_at

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(key: str, attempt: int, status: str, **times: float) -> dict[str, Any]:
    """An attempt: its step, result, error and the seconds after T0 it reached each status
    (created_at=0, running_at=1...)."""
    values: dict[str, Any] = {
        "step_key": key,
        "from_step_key": None,
        "attempt": attempt,
        "status": status,
        "result": None,
        "error": None,
    }
    values["times"] = {column: at(seconds) for column, seconds in times.items()}
    return values


def audit(action: str, seconds: float, user: str | None = "ops") -> dict[str, Any]:
    return {"action": action, "user": user, "created_at": at(seconds)}


COLUMNS = {
    "pending": "created_at",
    "scheduled": "scheduled_at",
    "running": "running_at",
    "waiting": "waiting_at",
    "succeeded": "succeeded_at",
    "failed": "failed_at",
}


def timeline(attempts: list[dict[str, Any]], actions: list[dict[str, Any]]) -> list[dict]:
    """The timeline of these attempts and operator actions, as the event log holds them when
    each event committed at the moment it names (in time order, numbered from 0)."""
    log = [
        {"at": times[column], "step_key": a["step_key"], "attempt": a["attempt"], "event": event}
        for a in attempts
        for times in [a["times"]]
        for event, column in COLUMNS.items()
        if column in times
    ]
    log += [
        {"at": e["created_at"], "step_key": None, "attempt": None, "event": e["action"]}
        | {"user": e["user"]}
        for e in actions
    ]
    log.sort(key=lambda event: event["at"])
    rows = [{"seq": seq, "user": None, **event} for seq, event in enumerate(log)]
    return build_timeline(rows, {(a["step_key"], a["attempt"]): a for a in attempts})


def retried_step() -> list[dict[str, Any]]:
    """`charge` fails its first attempt and succeeds on the second; `ship` follows."""
    first = row("charge", 1, "failed", created_at=0, running_at=0, failed_at=1)
    first["error"] = {"code": None, "message": "declined"}
    second = row("charge", 2, "succeeded", created_at=2, running_at=2, succeeded_at=3)
    second["result"] = {"paid": 5}
    ship = row("ship", 1, "succeeded", created_at=4, running_at=4, succeeded_at=5)
    ship["from_step_key"] = "charge"
    ship["result"] = "shipped"
    return timeline([first, second, ship], [])


def brief(events: list[dict[str, Any]]) -> list[tuple]:
    return [(e["seq"], e["step_key"], e["attempt"], e["event"]) for e in events]


def test_build_timeline__each_event_has_exactly_the_listed_keys():
    done = row("charge", 1, "succeeded", created_at=0, scheduled_at=1, running_at=2, succeeded_at=3)
    done["from_step_key"] = "validate"
    done["result"] = {"paid": 5}

    events = timeline([done], [])

    assert events == [
        {
            "seq": 0,
            "at": at(0).isoformat(),
            "step_key": "charge",
            "attempt": 1,
            "event": "pending",
            "from_step_key": "validate",
        },
        {
            "seq": 1,
            "at": at(1).isoformat(),
            "step_key": "charge",
            "attempt": 1,
            "event": "scheduled",
        },
        {"seq": 2, "at": at(2).isoformat(), "step_key": "charge", "attempt": 1, "event": "running"},
        {
            "seq": 3,
            "at": at(3).isoformat(),
            "step_key": "charge",
            "attempt": 1,
            "event": "succeeded",
            "result": {"paid": 5},
        },
    ]


def test_build_timeline__failed_attempt_carries_its_error_and_no_result():
    failed = row("charge", 1, "failed", created_at=0, running_at=1, failed_at=2)
    failed["error"] = {"code": "TIMEOUT", "message": "too slow"}

    last = timeline([failed], [])[-1]

    assert last == {
        "seq": 2,
        "at": at(2).isoformat(),
        "step_key": "charge",
        "attempt": 1,
        "event": "failed",
        "error": {"code": "TIMEOUT", "message": "too slow"},
    }


def test_build_timeline__operator_action_has_null_step_and_attempt_and_a_user():
    events = timeline([], [audit("cancel", 1, user="alice"), audit("retry", 2, user=None)])

    assert events == [
        {
            "seq": 0,
            "at": at(1).isoformat(),
            "step_key": None,
            "attempt": None,
            "event": "cancel",
            "user": "alice",
        },
        {
            "seq": 1,
            "at": at(2).isoformat(),
            "step_key": None,
            "attempt": None,
            "event": "retry",
            "user": None,
        },
    ]


def test_build_timeline__keeps_the_logs_order_and_seqs():
    rows = [
        {"seq": 7, "at": at(5), "step_key": "b", "attempt": 1, "event": "running", "user": None},
        {"seq": 8, "at": at(4), "step_key": "a", "attempt": 1, "event": "running", "user": None},
    ]

    assert brief(build_timeline(rows, {})) == [(7, "b", 1, "running"), (8, "a", 1, "running")]


def test_state_at__before_the_first_event_is_empty_and_pending():
    events = retried_step()

    assert state_at(events, -1, run_status="completed") == {
        "seq": -1,
        "at": None,
        "phase": "pending",
        "steps": {},
        "path": [],
        "results": {},
    }


def test_state_at__no_events_is_pending():
    assert state_at([], run_status="running")["phase"] == "pending"


def test_state_at__between_attempts_the_step_is_failed_and_the_phase_failed():
    events = retried_step()
    failed_seq = next(e["seq"] for e in events if e["event"] == "failed")

    state = state_at(events, failed_seq, run_status="completed")

    assert state["phase"] == "failed"
    assert state["steps"] == {
        "charge": {
            "status": "failed",
            "attempt": 1,
            "result": None,
            "error": {"code": None, "message": "declined"},
        }
    }
    assert state["results"] == {}


def test_state_at__a_retrys_pending_reopens_the_step_with_nothing_recorded():
    events = retried_step()
    reopened = next(e["seq"] for e in events if e["event"] == "pending" and e["attempt"] == 2)

    state = state_at(events, reopened, run_status="completed")

    assert state["phase"] == "running"
    assert state["steps"]["charge"] == {
        "status": "pending",
        "attempt": 2,
        "result": None,
        "error": None,
    }


def test_state_at__last_event_of_a_completed_run_is_completed():
    state = state_at(retried_step(), run_status="completed")

    assert state["seq"] == 8
    assert state["at"] == at(5).isoformat()
    assert state["phase"] == "completed"
    assert state["path"] == ["charge", "ship"]
    assert state["results"] == {"charge": {"paid": 5}, "ship": "shipped"}
    assert state["steps"]["charge"] == {
        "status": "succeeded",
        "attempt": 2,
        "result": {"paid": 5},
        "error": None,
    }


def test_state_at__between_steps_of_a_completed_run_is_idle():
    events = retried_step()
    charge_done = next(e["seq"] for e in events if e["event"] == "succeeded")

    state = state_at(events, charge_done, run_status="completed")

    assert state["phase"] == "idle"
    assert state["path"] == ["charge"]
    assert state["results"] == {"charge": {"paid": 5}}


def test_state_at__last_event_of_a_running_run_follows_its_steps():
    events = retried_step()

    assert state_at(events, run_status="running")["phase"] == "idle"
    assert state_at(events[:-1], run_status="running")["phase"] == "running"


def test_state_at__operator_actions_after_the_end_keep_the_runs_end():
    events = timeline(
        [row("a", 1, "succeeded", created_at=0, running_at=0, succeeded_at=1)], [audit("fork", 9)]
    )

    # pending, running, succeeded, fork
    assert state_at(events, 3, run_status="completed")["phase"] == "completed"
    assert state_at(events, 2, run_status="completed")["phase"] == "completed"
    assert state_at(events, 1, run_status="completed")["phase"] == "running"


def test_state_at__failed_run_ends_failed_even_when_no_step_failed():
    # The body itself raised after its only step succeeded.
    events = timeline([row("a", 1, "succeeded", created_at=0, running_at=0, succeeded_at=1)], [])

    assert state_at(events, run_status="failed")["phase"] == "failed"


def test_state_at__a_waiting_step_is_the_waiting_phase():
    events = timeline([row("ok", 1, "waiting", created_at=0, waiting_at=1)], [])

    assert state_at(events, run_status="running")["phase"] == "waiting"
    assert state_at(events, 0, run_status="running")["phase"] == "running"


def test_state_at__cancel_and_suspend_halt_until_resume_or_retry():
    events = timeline(
        [row("a", 1, "scheduled", created_at=0, scheduled_at=1)],
        [audit("suspend", 2), audit("resume", 3), audit("cancel", 4)],
    )
    phases = [state_at(events, seq, run_status="cancelled")["phase"] for seq in range(len(events))]

    # pending, scheduled, suspend, resume, cancel
    assert phases == ["running", "running", "idle", "running", "idle"]


def test_state_at__suspended_run_parked_on_a_pending_step_is_idle():
    # RPC_NOT_FOUND leaves the step pending (no attempt) and suspends the run: no audit row.
    events = timeline([row("pay", 1, "pending", created_at=0)], [])

    assert state_at(events, run_status="suspended")["phase"] == "idle"


def test_state_at__a_caught_failure_followed_by_success_is_not_failed():
    bad = row("a", 1, "failed", created_at=0, running_at=0, failed_at=1)
    good = row("b", 1, "succeeded", created_at=2, running_at=2, succeeded_at=3)

    state = state_at(timeline([bad, good], []), run_status="running")

    assert state["phase"] == "idle"
    assert state["results"] == {"b": None}
    assert state["steps"]["a"]["status"] == "failed"


def test_state_at__stale_events_change_nothing():
    # Clock skew between processes: attempt 1's outcome sorts after attempt 2 began, and a
    # progress event sorts after the outcome of its own attempt.
    late_outcome = row("a", 1, "failed", created_at=0, running_at=0, failed_at=5)
    second = row("a", 2, "succeeded", created_at=2, running_at=6, succeeded_at=4)
    second["result"] = "ok"

    state = state_at(timeline([late_outcome, second], []), run_status="completed")

    assert state["steps"]["a"] == {
        "status": "succeeded",
        "attempt": 2,
        "result": "ok",
        "error": None,
    }


def test_state_at__path_is_first_seen_order_and_keys_are_listed_once():
    events = timeline(
        [
            row("b", 1, "failed", created_at=1, running_at=1, failed_at=2),
            row("a", 1, "succeeded", created_at=0, running_at=0, succeeded_at=0.5),
            row("b", 2, "succeeded", created_at=3, running_at=3, succeeded_at=4),
        ],
        [],
    )

    assert state_at(events, run_status="completed")["path"] == ["a", "b"]


def test_resolve_seq__datetime_is_inclusive():
    events = retried_step()  # at 0, 0, 1, 2, 2, 3, 4, 4, 5 seconds

    assert resolve_seq(events, at(1)) == 2
    assert resolve_seq(events, at(2)) == 4
    assert resolve_seq(events, at(1) - timedelta(microseconds=1)) == 1
    assert resolve_seq(events, at(-1)) == -1
    assert resolve_seq(events, at(60)) == len(events) - 1


def test_resolve_seq__naive_datetime_is_read_in_the_current_time_zone():
    events = retried_step()

    assert resolve_seq(events, at(1).replace(tzinfo=None)) == resolve_seq(events, at(1))


@pytest.mark.parametrize(
    ("text", "expected"), [("3", 3), (" -1 ", -1), ("2025-03-01T12:00:01Z", 2)]
)
def test_resolve_seq__strings_are_a_seq_or_an_iso_datetime(text, expected):
    assert resolve_seq(retried_step(), text) == expected


@pytest.mark.parametrize(
    "bad", [9, -2, True, 1.5, "yesterday", "2025-13-45T00:00:00", "²", "9" * 5000, "1" * 30]
)
def test_resolve_seq__out_of_range_or_unreadable_is_invalid_input(bad):
    with pytest.raises(pw.InvalidInput):
        resolve_seq(retried_step(), bad)
