"""`pw.recover()`: heal from the tables alone what lost messages and dead workers left behind
(docs/architecture.md §8). Queued tasks run in-process through `drain_queue`."""

from __future__ import annotations

import json
import logging
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.operations.recovery import RedispatchBackoff
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.attempts import claim_next_attempt
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.leases import acquire_run_lease
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.worker_registration import this_process
from tests.graph_runs import Calls, register_graph_functions
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"
NOTHING = {
    "timers": 0,
    "lapsed": 0,
    "relayed": 0,
    "lapsed_runs": 0,
    "stalled": 0,
    "admitted": 0,
    "schedules": 0,
    "backfills": 0,
}
RELAY_AT_ONCE = {"RELAY_PENDING_AFTER_SECONDS": 0}
STALLED_AT_ONCE = {"STALLED_RUN_AFTER_SECONDS": 0}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ran() -> list[int]:
    """`rec.order`: one queued step `charge` (retries from the input), then a short sleep when
    the input asks for one. Returns the attempts `rec.charge` ran."""
    attempts: list[int] = []

    @pw.step_function("rec.charge", inline=False)
    def charge(data: dict, ctx: pw.StepContext) -> dict:
        attempts.append(ctx.attempt)
        return {"charged": data["amount"], "attempt": ctx.attempt}

    @pw.workflow("rec.order")
    def order(wf: pw.Workflow, input: dict) -> dict:
        charged = wf.do("charge", "rec.charge", input, retries=input.get("retries", 2))
        if input.get("nap"):
            wf.sleep("nap", input["nap"])
        return charged

    return attempts


def recover(**settings: float) -> dict[str, int]:
    with override_settings(PIKKU_WORKFLOWS=settings):
        return pw.recover()


def lose_every_message() -> int:
    """What a rotated SECRET_KEY or a renamed cluster does to queued django-q2 tasks."""
    deleted, _ = OrmQ.objects.all().delete()
    return deleted


def run_of(run_id: str) -> WorkflowRun:
    return WorkflowRun.objects.get(pk=run_id)


def step_of(run_id: str, key: str = "charge") -> WorkflowStep:
    return WorkflowStep.objects.get(run_id=run_id, step_key=key)


def history(run_id: str, key: str = "charge") -> list[tuple]:
    rows = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
    return list(rows.order_by("attempt").values_list("attempt", "status", "result"))


def dispatched_then_lost(input: dict) -> str:
    run_id = pw.start_workflow("rec.order", input)
    orchestrate(run_id)
    assert step_of(run_id).status == StepStatus.SCHEDULED
    assert lose_every_message() == 2  # the start's pass and the step's execution
    return run_id


def claimed_by_a_worker_that_died(input: dict) -> str:
    """A worker claimed the step and died in the body: its lease is left to lapse."""
    run_id = pw.start_workflow("rec.order", input)
    orchestrate(run_id)
    lose_every_message()
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        step = claim_next_attempt(run_id, "charge").step
    assert step is not None and step.status == StepStatus.RUNNING
    return run_id


# --- lost messages -------------------------------------------------------------------------


def test_recover__relays_a_scheduled_step_whose_message_was_lost(ran, fresh_backoff):
    run_id = dispatched_then_lost({"amount": 5})

    counts = recover(**RELAY_AT_ONCE)

    assert counts == {**NOTHING, "relayed": 1}
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]
    drain_queue()
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"charged": 5, "attempt": 1})
    assert ran == [1]


def test_recover__a_young_scheduled_step_is_left_alone(ran, fresh_backoff):
    dispatched_then_lost({"amount": 5})

    counts = pw.recover()  # RELAY_PENDING_AFTER_SECONDS defaults to 30

    assert counts == NOTHING
    assert queued_tasks() == []


def test_recover__relaying_a_step_still_queued_is_harmless(ran, fresh_backoff):
    # The message was not lost, only slow: the relay duplicates it and the claim absorbs that.
    run_id = pw.start_workflow("rec.order", {"amount": 5})
    orchestrate(run_id)

    assert recover(**RELAY_AT_ONCE)["relayed"] == 1
    drain_queue()

    assert run_of(run_id).status == RunStatus.COMPLETED
    assert ran == [1]
    assert history(run_id) == [(1, StepStatus.SUCCEEDED, {"charged": 5, "attempt": 1})]


# --- dead workers --------------------------------------------------------------------------


def test_recover__redispatches_a_lapsed_lease_as_a_new_attempt(ran, fresh_backoff, caplog):
    run_id = claimed_by_a_worker_that_died({"amount": 5})
    lapsed_at = step_of(run_id).lease_expires_at
    caplog.set_level(logging.WARNING, logger="pikku_workflows.events")

    counts = pw.recover()

    assert counts == {**NOTHING, "lapsed": 1}
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "charge"))]
    drain_queue()
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"charged": 5, "attempt": 2})
    assert ran == [2]
    assert history(run_id) == [
        (1, StepStatus.FAILED, None),  # the dead worker's attempt: ended when its lease lapsed
        (2, StepStatus.SUCCEEDED, {"charged": 5, "attempt": 2}),
    ]
    dead = WorkflowStepHistory.objects.get(step__run_id=run_id, attempt=1)
    assert (dead.failed_at, dead.error["code"], dead.worker) == (
        lapsed_at,
        "STEP_LEASE_EXPIRED",
        this_process(),
    )
    assert "attempt 1: lease lapsed" in dead.error["message"]
    # The API's timeline shows the break: attempt 1 ends (recorded when the lapse was found),
    # then attempt 2 runs.
    charge = [e for e in pw.get_run_timeline(run_id) if e["step_key"] == "charge"]
    events = {(e["attempt"], e["event"]): e for e in charge}
    assert set(events) >= {(1, "running"), (1, "failed"), (2, "running"), (2, "succeeded")}
    lapse = events[1, "failed"]
    assert lapse["error"]["code"] == "STEP_LEASE_EXPIRED"
    assert events[1, "running"]["seq"] < lapse["seq"] < events[2, "running"]["seq"]
    # One sentence for the takeover: run, step, the silent worker, the new attempt.
    [takeover] = [r.getMessage() for r in caplog.records if "takes over" in r.getMessage()]
    assert takeover == (
        f"pikku_workflows: run {run_id} step charge: attempt 1's lease lapsed (worker "
        f"{this_process()} went silent); attempt 2 takes over"
    )


def test_recover__a_live_lease_is_not_redispatched(ran, fresh_backoff):
    run_id = pw.start_workflow("rec.order", {"amount": 5})
    orchestrate(run_id)
    lose_every_message()
    step = claim_next_attempt(run_id, "charge").step  # a healthy worker, 60 s lease
    assert step is not None

    assert recover(**RELAY_AT_ONCE, **STALLED_AT_ONCE) == NOTHING
    assert queued_tasks() == []


def test_recover__a_lapsed_lease_on_the_last_attempt_fails_the_step_and_the_run(ran, fresh_backoff):
    run_id = claimed_by_a_worker_that_died({"amount": 5, "retries": 0})

    assert pw.recover()["lapsed"] == 1
    drain_queue()

    step = step_of(run_id)
    assert (step.status, step.attempt, step.lease_expires_at) == (StepStatus.FAILED, 1, None)
    assert step.error["code"] == "STEP_LEASE_EXPIRED"
    assert step.error["step_key"] == "charge"
    run = run_of(run_id)
    assert run.status == RunStatus.FAILED
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "charge")
    assert ran == []  # the body never ran again
    assert [(attempt, status) for attempt, status, _ in history(run_id)] == [(1, StepStatus.FAILED)]


# --- stalled runs --------------------------------------------------------------------------


def test_recover__resumes_a_run_whose_start_message_was_lost(ran, fresh_backoff):
    run_id = pw.start_workflow("rec.order", {"amount": 5})
    assert lose_every_message() == 1

    assert pw.recover() == NOTHING  # 5 minutes is the default stall window
    counts = recover(**STALLED_AT_ONCE)

    assert counts == {**NOTHING, "stalled": 1}
    assert queued_tasks() == [(ORCHESTRATE, (run_id,))]
    drain_queue()
    assert run_of(run_id).status == RunStatus.COMPLETED
    assert ran == [1]


def test_recover__resumes_a_run_whose_timer_fired_but_pass_message_was_lost(ran, fresh_backoff):
    # A crash between the two writes of waking a sleep: the timer row fired, the pass never came.
    run_id = pw.start_workflow("rec.order", {"amount": 5, "nap": "200ms"})
    drain_queue()
    assert step_of(run_id, "nap").status == StepStatus.SCHEDULED
    deadline = time.monotonic() + 10
    while not fire_due_timers():
        assert time.monotonic() < deadline, "the sleep never came due"
        time.sleep(0.02)
    lose_every_message()

    counts = recover(**STALLED_AT_ONCE)

    assert counts["stalled"] == 1
    drain_queue()
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"charged": 5, "attempt": 1})


@pytest.mark.parametrize(
    "in_flight", ["scheduled step", "running step", "future sleep", "retry backoff"]
)
def test_recover__a_run_with_work_in_flight_is_not_stalled(ran, fresh_backoff, in_flight):
    @pw.step_function("rec.fails", inline=False)
    def fails(data: dict, ctx: pw.StepContext) -> None:
        raise RuntimeError("try again later")

    @pw.workflow("rec.backoff")
    def backoff_workflow(wf: pw.Workflow, input: dict) -> None:
        wf.do("fails", "rec.fails", {}, retries=3, retry_delay="1h")

    if in_flight == "scheduled step":
        run_id = pw.start_workflow("rec.order", {"amount": 5})
        orchestrate(run_id)
    elif in_flight == "running step":
        run_id = pw.start_workflow("rec.order", {"amount": 5})
        orchestrate(run_id)
        claim_next_attempt(run_id, "charge")
    elif in_flight == "future sleep":
        run_id = pw.start_workflow("rec.order", {"amount": 5, "nap": "1h"})
        drain_queue()
        assert step_of(run_id, "nap").status == StepStatus.SCHEDULED
    else:
        run_id = pw.start_workflow("rec.backoff")
        drain_queue()
        assert step_of(run_id, "fails").status == StepStatus.FAILED
    lose_every_message()

    counts = recover(**STALLED_AT_ONCE)

    assert counts == NOTHING
    assert queued_tasks() == []
    assert run_of(run_id).status == RunStatus.RUNNING


def test_recover__resumes_a_run_whose_orchestrating_worker_died_mid_pass(ran, fresh_backoff):
    # The dead pass never released the run lease; a message meanwhile found it held and only
    # flagged a rerun for a holder that is gone. Once the lease lapses the run is resumed.
    run_id = pw.start_workflow("rec.order", {"amount": 5})
    lose_every_message()
    with override_settings(PIKKU_WORKFLOWS={"RUN_LEASE_SECONDS": 0.3}):
        assert acquire_run_lease(run_id, "dead-worker")
    orchestrate(run_id)
    assert WorkflowRun.objects.filter(pk=run_id, rerun_requested=True).exists()
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()

    deadline = time.monotonic() + 10
    while not pw.recover()["lapsed_runs"]:  # held while the lease is live; no stall window
        assert time.monotonic() < deadline, "the dead pass's lease never lapsed"
        time.sleep(0.05)
    drain_queue()

    run = run_of(run_id)
    assert (run.status, run.lease_holder) == (RunStatus.COMPLETED, None)
    assert ran == [1]


# --- backoff -------------------------------------------------------------------------------


def test_recover__backoff_holds_a_run_between_relays(ran, monkeypatch):
    from pikku_workflows.engine.operations import recovery

    clock = FakeClock()
    monkeypatch.setattr(recovery, "backoff", RedispatchBackoff(clock=clock))
    run_id = dispatched_then_lost({"amount": 5})

    relayed = []
    for advance in [0, 1, 28.9, 0.2, 59.8, 0.2, 100]:
        clock.now += advance
        lose_every_message()
        relayed.append(recover(**RELAY_AT_ONCE)["relayed"])

    # free, held to 30 s, free at 30 s, held to +60 s, free, held (120 s)
    assert relayed == [1, 0, 0, 1, 0, 1, 0]
    drain_queue()
    assert run_of(run_id).status == RunStatus.RUNNING  # every message was lost again
    clock.now += 20
    recover(**RELAY_AT_ONCE)
    drain_queue()
    assert run_of(run_id).status == RunStatus.COMPLETED
    assert ran == [1]


def test_recover__backoff_starts_afresh_once_the_run_moved_on(monkeypatch, through_the_queue):
    # The progress the backoff compares is read from the tables: the run's and its steps' last
    # change. A run relayed a moment ago is relayed again at once when it has moved on since.
    from pikku_workflows.engine.operations import recovery

    @pw.step_function("rec.step", inline=False)
    def step(data: dict, ctx: pw.StepContext) -> str:
        return ctx.step_key

    @pw.workflow("rec.two_steps")
    def two_steps(wf: pw.Workflow, input: dict) -> list[str]:
        return [wf.do("first", "rec.step", {}), wf.do("second", "rec.step", {})]

    clock = FakeClock()
    monkeypatch.setattr(recovery, "backoff", RedispatchBackoff(clock=clock))
    run_id = pw.start_workflow("rec.two_steps", {})
    orchestrate(run_id)
    lose_every_message()
    assert recover(**RELAY_AT_ONCE)["relayed"] == 1  # `first`, and the run is held for 30 s

    lose_every_message()
    tasks.execute_step(run_id, "first")  # a worker took the relay; its pass sends `second`
    assert step_of(run_id, "second").status == StepStatus.SCHEDULED
    lose_every_message()  # and that message is lost
    clock.now += 1

    assert recover(**RELAY_AT_ONCE)["relayed"] == 1  # it moved on: relayed at once, not held
    assert queued_tasks() == [(EXECUTE_STEP, (run_id, "second"))]
    lose_every_message()
    clock.now += 29
    assert recover(**RELAY_AT_ONCE)["relayed"] == 0  # stuck at `second`: held 30 s again
    clock.now += 1
    assert recover(**RELAY_AT_ONCE)["relayed"] == 1  # the first hold, not a doubled one
    drain_queue()
    assert run_of(run_id).output == ["first", "second"]


def test_recover__backoff_is_per_run(ran, monkeypatch):
    from pikku_workflows.engine.operations import recovery

    clock = FakeClock()
    monkeypatch.setattr(recovery, "backoff", RedispatchBackoff(clock=clock))
    first = dispatched_then_lost({"amount": 1})
    assert recover(**RELAY_AT_ONCE)["relayed"] == 1
    lose_every_message()  # the relay is lost too
    second = dispatched_then_lost({"amount": 2})

    assert recover(**RELAY_AT_ONCE)["relayed"] == 1  # the second run only: the first is held
    assert queued_tasks() == [(EXECUTE_STEP, (second, "charge"))]
    drain_queue()
    assert run_of(second).status == RunStatus.COMPLETED
    assert run_of(first).status == RunStatus.RUNNING


def test_recover__relays_every_lost_step_of_a_fan_out_in_one_sweep(monkeypatch):
    from pikku_workflows.engine.operations import recovery

    register_graph_functions(Calls())
    branches = ["a", "b", "c"]
    nodes = {key: {"function": "g.q_echo"} for key in branches}
    pw.graph_workflow(
        "rec.fan_out",
        {"entry": "start", "nodes": {"start": {"function": "g.echo", "next": branches}, **nodes}},
    )
    clock = FakeClock()
    monkeypatch.setattr(recovery, "backoff", RedispatchBackoff(clock=clock))
    run_id = pw.start_workflow("rec.fan_out", {})
    orchestrate(run_id)
    lose_every_message()

    assert recover(**RELAY_AT_ONCE)["relayed"] == 3
    lose_every_message()  # lost again: the run is held, all of its steps with it
    assert recover(**RELAY_AT_ONCE)["relayed"] == 0
    clock.now += 30
    assert recover(**RELAY_AT_ONCE)["relayed"] == 3
    drain_queue()
    assert run_of(run_id).status == RunStatus.COMPLETED


def test_recover__one_sweep_holds_the_other(ran, monkeypatch):
    # A run two sweeps find (its start message lost: never started, and stalled) gets one
    # message, not two; until it moves on, neither sweep sends another.
    from pikku_workflows.engine.operations import recovery

    monkeypatch.setattr(recovery, "backoff", RedispatchBackoff(clock=FakeClock()))
    pw.start_workflow("rec.order", {"amount": 5})
    lose_every_message()

    assert recover(**RELAY_AT_ONCE, **STALLED_AT_ONCE) == {**NOTHING, "relayed": 1}
    lose_every_message()
    assert recover(**RELAY_AT_ONCE, **STALLED_AT_ONCE) == NOTHING


def test_pikku_recover_command__prints_the_counts(ran, fresh_backoff):
    run_id = dispatched_then_lost({"amount": 5})
    out = StringIO()

    with override_settings(PIKKU_WORKFLOWS=RELAY_AT_ONCE):
        call_command("pikku_recover", stdout=out)

    assert json.loads(out.getvalue()) == {**NOTHING, "relayed": 1}
    drain_queue()
    assert run_of(run_id).status == RunStatus.COMPLETED
