"""`pw.get_run_timeline` and `pw.reconstruct_run_state` on real runs: retries, queued steps,
child runs, operator actions and forks."""

from __future__ import annotations

from datetime import datetime

import pytest

import pikku_workflows as pw
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STEP_KEYS = {"seq", "at", "step_key", "attempt", "event"}


def brief(events: list[dict]) -> list[tuple]:
    return [(e["step_key"], e["attempt"], e["event"]) for e in events]


@pytest.fixture
def flaky():
    """`timeline.order`: `charge` fails its first `input["failures"]` attempts, then `ship`."""
    attempts: list[int] = []

    @pw.step_function("timeline.charge")
    def charge(data, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt <= data["failures"]:
            raise ConnectionError(f"declined on attempt {ctx.attempt}")
        return {"charged": 5}

    @pw.workflow("timeline.order")
    def order(wf, input):
        charged = wf.do("charge", "timeline.charge", input, retries=input["retries"], retry_delay=0)
        return {"shipped": wf.do("ship", lambda: "parcel"), **charged}

    return attempts


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


def test_timeline__a_retried_step_shows_every_attempt_in_order(flaky):
    run_id = pw.start_workflow("timeline.order", {"failures": 1, "retries": 2}, inline=True)

    events = pw.get_run_timeline(run_id)

    assert brief(events) == [
        ("charge", 1, "pending"),
        ("charge", 1, "running"),
        ("charge", 1, "failed"),
        ("charge", 2, "pending"),
        ("charge", 2, "running"),
        ("charge", 2, "succeeded"),
        ("ship", 1, "pending"),
        ("ship", 1, "running"),
        ("ship", 1, "succeeded"),
    ]
    assert [e["seq"] for e in events] == list(range(9))
    times = [datetime.fromisoformat(e["at"]) for e in events]
    assert times == sorted(times)
    assert all(t.tzinfo is not None for t in times)
    by_event = {(e["step_key"], e["attempt"], e["event"]): e for e in events}
    assert set(by_event["charge", 1, "pending"]) == STEP_KEYS | {"from_step_key"}
    assert by_event["charge", 1, "pending"]["from_step_key"] is None
    assert by_event["ship", 1, "pending"]["from_step_key"] == "charge"
    assert set(by_event["charge", 1, "running"]) == STEP_KEYS
    failed = by_event["charge", 1, "failed"]
    assert set(failed) == STEP_KEYS | {"error"}
    assert failed["error"]["message"] == "declined on attempt 1"
    succeeded = by_event["charge", 2, "succeeded"]
    assert (set(succeeded), succeeded["result"]) == (STEP_KEYS | {"result"}, {"charged": 5})


def test_timeline__the_events_of_one_commit_share_its_moment(flaky):
    run_id = pw.start_workflow("timeline.order", {"failures": 0, "retries": 0}, inline=True)

    at = {(e["step_key"], e["event"]): e["at"] for e in pw.get_run_timeline(run_id)}

    # The charge's success is kept for the statement that creates the ship step: one commit,
    # however the numbering statement happened to visit its rows.
    assert at["charge", "succeeded"] == at["ship", "pending"]
    assert at["charge", "pending"] < at["charge", "succeeded"]


def test_reconstruct_run_state__walks_a_retried_run_through_time(flaky):
    run_id = pw.start_workflow("timeline.order", {"failures": 1, "retries": 2}, inline=True)
    events = pw.get_run_timeline(run_id)

    before = pw.reconstruct_run_state(run_id, -1)
    between = pw.reconstruct_run_state(run_id, 2)
    retrying = pw.reconstruct_run_state(run_id, 3)
    charged = pw.reconstruct_run_state(run_id, 5)
    final = pw.reconstruct_run_state(run_id)

    assert (before["phase"], before["steps"], before["path"], before["at"]) == (
        "pending",
        {},
        [],
        None,
    )
    assert between["phase"] == "failed"
    assert between["steps"]["charge"]["status"] == "failed"
    assert between["steps"]["charge"]["error"]["message"] == "declined on attempt 1"
    assert retrying["phase"] == "running"
    assert retrying["steps"]["charge"] == {
        "status": "pending",
        "attempt": 2,
        "result": None,
        "error": None,
    }
    assert (charged["phase"], charged["results"]) == ("idle", {"charge": {"charged": 5}})
    assert final == {
        "seq": 8,
        "at": events[8]["at"],
        "phase": "completed",
        "steps": {
            "charge": {
                "status": "succeeded",
                "attempt": 2,
                "result": {"charged": 5},
                "error": None,
            },
            "ship": {"status": "succeeded", "attempt": 1, "result": "parcel", "error": None},
        },
        "path": ["charge", "ship"],
        "results": {"charge": {"charged": 5}, "ship": "parcel"},
    }


def test_reconstruct_run_state__at_a_datetime_includes_events_at_that_moment(flaky):
    run_id = pw.start_workflow("timeline.order", {"failures": 1, "retries": 2}, inline=True)
    events = pw.get_run_timeline(run_id)
    moment = datetime.fromisoformat(events[2]["at"])
    last_at_moment = max(e["seq"] for e in events if datetime.fromisoformat(e["at"]) <= moment)

    state = pw.reconstruct_run_state(run_id, at=moment)

    assert state["seq"] == last_at_moment >= 2
    assert state == pw.reconstruct_run_state(run_id, at=last_at_moment)
    assert pw.reconstruct_run_state(run_id, at=events[2]["at"])["seq"] == last_at_moment


def test_timeline__operator_retry_joins_with_its_user_and_the_attempt_carries_on(flaky, ops):
    run_id = pw.start_workflow("timeline.order", {"failures": 2, "retries": 1}, inline=True)
    assert pw.reconstruct_run_state(run_id)["phase"] == "failed"

    pw.retry_run(run_id, by=ops, reason="card updated")
    drain_queue()

    events = pw.get_run_timeline(run_id)
    assert brief(events)[6:] == [
        ("charge", 3, "pending"),
        (None, None, "retry"),
        ("charge", 3, "running"),
        ("charge", 3, "succeeded"),
        ("ship", 1, "pending"),
        ("ship", 1, "running"),
        ("ship", 1, "succeeded"),
    ]
    retry = events[7]
    assert retry == {
        "seq": 7,
        "at": retry["at"],
        "step_key": None,
        "attempt": None,
        "event": "retry",
        "user": "ops",
    }
    assert pw.reconstruct_run_state(run_id, 5)["phase"] == "failed"
    reopened = pw.reconstruct_run_state(run_id, 6)
    assert (reopened["phase"], reopened["steps"]["charge"]["attempt"]) == ("running", 3)
    assert pw.reconstruct_run_state(run_id)["phase"] == "completed"


def test_timeline__queued_step_shows_scheduled_and_child_step_shows_waiting(through_the_queue):
    @pw.step_function("timeline.remote", inline=False)
    def remote(data, ctx):
        return "remote ok"

    @pw.workflow("timeline.child")
    def child(wf, input):
        return "child ok"

    @pw.workflow("timeline.mixed")
    def mixed(wf, input):
        wf.do("remote", "timeline.remote", {})
        return wf.do("child", "timeline.child", {})

    run_id = pw.start_workflow("timeline.mixed", {})
    drain_queue()

    assert brief(pw.get_run_timeline(run_id)) == [
        ("remote", 1, "pending"),
        ("remote", 1, "scheduled"),
        ("remote", 1, "running"),
        ("remote", 1, "succeeded"),
        ("child", 1, "pending"),
        ("child", 1, "waiting"),
        ("child", 1, "succeeded"),
    ]
    assert pw.reconstruct_run_state(run_id, 5)["phase"] == "waiting"
    assert pw.reconstruct_run_state(run_id)["results"] == {
        "remote": "remote ok",
        "child": "child ok",
    }


def test_timeline__cancelled_run_ends_idle_with_the_cancel_on_the_timeline(ops):
    @pw.workflow("timeline.napping")
    def napping(wf, input):
        wf.sleep("nap", "1h")

    run_id = pw.start_workflow("timeline.napping", {}, inline=True)
    assert pw.reconstruct_run_state(run_id)["phase"] == "running"  # the timer is armed

    pw.cancel_run(run_id, reason="stop", by=ops)

    assert brief(pw.get_run_timeline(run_id)) == [
        ("nap", 1, "pending"),
        ("nap", 1, "scheduled"),
        (None, None, "cancel"),
    ]
    state = pw.reconstruct_run_state(run_id)
    assert (state["phase"], state["steps"]["nap"]["status"]) == ("idle", "scheduled")


def test_timeline__fork_shows_copied_steps_and_the_source_shows_the_fork(flaky):
    source_id = pw.start_workflow("timeline.order", {"failures": 0, "retries": 0}, inline=True)

    fork_id = pw.fork_run(source_id, from_step="ship")
    drain_queue()

    assert brief(pw.get_run_timeline(fork_id)) == [
        ("charge", 1, "pending"),
        ("charge", 1, "succeeded"),
        (None, None, "fork"),  # the fork is recorded on the new run too, after its copies
        ("ship", 1, "pending"),
        ("ship", 1, "running"),
        ("ship", 1, "succeeded"),
    ]
    assert brief(pw.get_run_timeline(source_id))[-1] == (None, None, "fork")
    assert pw.reconstruct_run_state(source_id)["phase"] == "completed"
    assert flaky == [1]


def test_timeline__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.get_run_timeline("00000000-0000-0000-0000-000000000000")
    with pytest.raises(pw.RunNotFound):
        pw.reconstruct_run_state("not-a-uuid")


@pytest.mark.parametrize("at", [99, -2, "soon"])
def test_reconstruct_run_state__an_unreadable_point_is_invalid_input(flaky, at):
    run_id = pw.start_workflow("timeline.order", {"failures": 0, "retries": 0}, inline=True)

    with pytest.raises(pw.InvalidInput):
        pw.reconstruct_run_state(run_id, at)
