"""Step claims under real concurrency: threads with their own connections race the claim of one
queued step, the retry of a failed one, and the outcome writes of a stale and a current attempt."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.operations.timers import claim_due_timers
from pikku_workflows.engine.replay.attempts import (
    Outcome,
    Recorded,
    claim_next_attempt,
    record_outcome,
)
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.leases import Heartbeat, release_step_leases, renew_leases
from pikku_workflows.exceptions import InvalidTransition, StepSuperseded
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.retry import RetryPolicy
from pikku_workflows.sql import without_comments
from pikku_workflows.status import RunStatus, StepStatus
from tests.concurrency.harness import JOIN_TIMEOUT, race
from tests.conftest import wait_until
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8
ROUNDS = 3
STEP_TABLE = WorkflowStep._meta.db_table


class BodyLog:
    """What the body of the queued step function saw, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: list[int] = []

    def enter(self, attempt: int) -> None:
        with self._lock:
            self.attempts.append(attempt)


@pytest.fixture
def body_log() -> BodyLog:
    """Register `t.slow` (a queued step function) and `t.one_slow_step`, a workflow of it.

    The input sets how long the body works, how many first attempts fail, and the retry policy.
    """
    log = BodyLog()

    @pw.step_function("t.slow", inline=False)
    def slow(data: dict, ctx: pw.StepContext) -> dict:
        log.enter(ctx.attempt)
        time.sleep(data.get("seconds", 0))
        if ctx.attempt <= data.get("fail_first", 0):
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return {"attempt": ctx.attempt}

    @pw.workflow("t.one_slow_step")
    def one_slow_step(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("slow", "t.slow", input, retries=input.get("retries", 2), retry_delay=0)

    return log


def scheduled_step(input: dict) -> WorkflowStep:
    """Start a queued run and drive its first pass: the step is dispatched and `scheduled`."""
    run_id = pw.start_workflow("t.one_slow_step", input)
    orchestrate(run_id)
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.SCHEDULED, 1)
    return step


def history(step: WorkflowStep) -> list[tuple]:
    return list(
        WorkflowStepHistory.objects.filter(step_id=step.pk)
        .order_by("attempt")
        .values_list("attempt", "status", "result")
    )


def reread(step: WorkflowStep) -> WorkflowStep:
    return WorkflowStep.objects.get(pk=step.pk)


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_execute_step__eight_deliveries_of_one_step_run_its_body_once(body_log, round_number):
    step = scheduled_step({"seconds": 0.3})

    outcomes = race([lambda _: tasks.execute_step(str(step.run_id), "slow")] * THREADS)

    assert outcomes == [None] * THREADS  # losers return quietly
    assert body_log.attempts == [1]
    assert history(step) == [(1, StepStatus.SUCCEEDED, {"attempt": 1})]
    drain_queue()  # the winner's orchestrator pass, and the stale execute_step message
    run = WorkflowRun.objects.get(pk=step.run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 1})
    assert body_log.attempts == [1]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_execute_step__two_retry_deliveries_burn_one_attempt(body_log, round_number):
    step = scheduled_step({"seconds": 0.2, "fail_first": 1})
    tasks.execute_step(str(step.run_id), "slow")
    failed = reread(step)
    assert (failed.status, failed.attempt, failed.attempt_limit) == (StepStatus.FAILED, 1, 3)
    assert failed.wake_at is not None  # retry_delay=0: due at once

    outcomes = race([lambda _: tasks.execute_step(str(step.run_id), "slow")] * 2)

    assert outcomes == [None, None]
    assert body_log.attempts == [1, 2]
    stored = reread(step)
    assert (stored.status, stored.attempt) == (StepStatus.SUCCEEDED, 2)
    assert [(attempt, status) for attempt, status, _ in history(step)] == [
        (1, StepStatus.FAILED),
        (2, StepStatus.SUCCEEDED),
    ]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_claim_step__racing_claims_of_a_failed_step_open_one_attempt(body_log, round_number):
    step = scheduled_step({"fail_first": 1})
    tasks.execute_step(str(step.run_id), "slow")
    assert reread(step).status == StepStatus.FAILED

    outcomes = race([lambda _: claim_next_attempt(step.run_id, "slow")] * THREADS)

    claimed = [outcome for outcome in outcomes if outcome.claimed]
    assert len(claimed) == 1, outcomes
    winner = claimed[0]
    assert (winner.step.status, winner.step.attempt, winner.expired) == (
        StepStatus.RUNNING,
        2,
        False,
    )
    stored = reread(step)
    assert (stored.status, stored.attempt) == (StepStatus.RUNNING, 2)
    assert [(attempt, status) for attempt, status, _ in history(step)] == [
        (1, StepStatus.FAILED),
        (2, StepStatus.RUNNING),
    ]


def stale_and_current_attempts(input: dict) -> tuple[WorkflowStep, WorkflowStep]:
    """Attempt 1 claimed by a worker whose lease lapsed at once, and attempt 2 that re-claimed it
    (what recovery does when a worker stalls): both claimers still hold their step object."""
    step = scheduled_step(input)
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        stale = claim_next_attempt(step.run_id, "slow").step
    current = claim_next_attempt(step.run_id, "slow").step
    assert stale is not None and current is not None
    assert (stale.attempt, current.attempt) == (1, 2)
    return stale, current


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_record_outcome__racing_stale_and_current_writes_only_current_lands(body_log, round_number):
    stale, current = stale_and_current_attempts({})
    policy = RetryPolicy(2, 0)
    outcomes_of_stale = [(True, {"from": "stale"}), (False, {"code": "BOOM", "message": "stale"})]
    writers: list[tuple[str, WorkflowStep, tuple[bool, Any]]] = []
    for index in range(25):
        if index % 2:
            writers.append(("current", current, (True, {"from": "current", "writer": index})))
        else:
            writers.append(("stale", stale, outcomes_of_stale[index % 4 // 2]))

    def write(writer: tuple[str, WorkflowStep, tuple[bool, Any]]) -> Callable[[Any], Any]:
        return lambda _: record_outcome(copy.deepcopy(writer[1]), Outcome(*writer[2]), policy)

    outcomes = race([write(writer) for writer in writers])

    by_writer = [(who, outcome) for (who, _, _), outcome in zip(writers, outcomes, strict=True)]
    stale_outcomes = [outcome for who, outcome in by_writer if who == "stale"]
    assert all(isinstance(outcome, StepSuperseded) for outcome in stale_outcomes), stale_outcomes
    current_outcomes = [
        (i, outcome) for i, (who, outcome) in enumerate(by_writer) if who == "current"
    ]
    winners = [index for index, outcome in current_outcomes if isinstance(outcome, Recorded)]
    losers = [outcome for _, outcome in current_outcomes if not isinstance(outcome, Recorded)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(loser, InvalidTransition) for loser in losers), losers
    stored = reread(current)
    assert (stored.status, stored.attempt, stored.error) == (StepStatus.SUCCEEDED, 2, None)
    assert stored.result == {"from": "current", "writer": winners[0]}
    rows = history(current)
    assert [(attempt, status) for attempt, status, _ in rows] == [
        (1, StepStatus.FAILED),  # the stale attempt's outcome never landed: its lease lapsed
        (2, StepStatus.SUCCEEDED),
    ]
    assert rows[0][2] is None
    assert rows[1][2] == stored.result


def test_execute_step__a_stale_worker_finishing_late_loses_quietly(body_log):
    # Attempt 1's worker stalls in the body; its lease lapses and a second delivery runs
    # attempt 2 to the end. Attempt 1 then returns: its result is dropped, nothing fails.
    handed_over = threading.Event()
    errors: list[BaseException] = []

    def second_delivery(run_id: str) -> None:
        try:
            tasks.execute_step(run_id, "other")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    @pw.step_function("t.stalls_once", inline=False)
    def stalls_once(data: dict, ctx: pw.StepContext) -> dict:
        body_log.enter(ctx.attempt)
        if ctx.attempt == 1:
            worker = threading.Thread(target=second_delivery, args=(ctx.run_id,), daemon=True)
            worker.start()
            worker.join(JOIN_TIMEOUT)
            handed_over.set()
        return {"attempt": ctx.attempt}

    @pw.workflow("t.stalling")
    def stalling(wf: pw.Workflow, input: dict) -> dict:
        return wf.do("other", "t.stalls_once", {}, retries=2)

    run_id = pw.start_workflow("t.stalling")
    orchestrate(run_id)
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 0}):
        tasks.execute_step(run_id, "other")

    assert handed_over.is_set() and not errors, errors
    assert body_log.attempts == [1, 2]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="other")
    assert (step.status, step.attempt, step.result) == (StepStatus.SUCCEEDED, 2, {"attempt": 2})
    assert [(attempt, status) for attempt, status, _ in history(step)] == [
        (1, StepStatus.FAILED),  # ended when attempt 2 took over its lapsed lease
        (2, StepStatus.SUCCEEDED),
    ]
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, {"attempt": 2}, None)


def test_renew_leases__a_stale_attempt_cannot_renew_or_release(body_log):
    stale, current = stale_and_current_attempts({})
    lease = reread(current).lease_expires_at
    assert lease is not None

    renew_leases([], [], [(stale.pk, stale.attempt)])
    assert reread(current).lease_expires_at == lease
    assert release_step_leases([(stale.pk, stale.attempt)]) == 0
    assert reread(current).lease_expires_at == lease

    renew_leases([], [], [(current.pk, current.attempt)])
    assert reread(current).lease_expires_at > lease


def test_renew_leases__racing_stale_renewals_never_touch_the_current_lease(body_log):
    stale, current = stale_and_current_attempts({})
    lease = reread(current).lease_expires_at
    stale_key = [(stale.pk, stale.attempt)]

    outcomes = race(
        [lambda _: renew_leases([], [], stale_key)] * (THREADS // 2)
        + [lambda _: release_step_leases(stale_key)] * (THREADS // 2)
    )

    assert outcomes == [None] * (THREADS // 2) + [0] * (THREADS // 2)
    stored = reread(current)
    assert (stored.status, stored.attempt, stored.lease_expires_at) == (
        StepStatus.RUNNING,
        2,
        lease,
    )


def test_heartbeat__steps_handed_back_stay_released_while_the_process_lives_on(body_log):
    # A terminated worker releases its step leases, then waits for its children: its heartbeat,
    # renewing every third of a lease meanwhile, must not push the released leases out again.
    _, current = stale_and_current_attempts({})
    claimed = reread(current).lease_expires_at
    beat = Heartbeat()
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 1, "RUN_LEASE_SECONDS": 1}):
        beat.hold_step(current.pk, current.attempt)
        wait_until(lambda: reread(current).lease_expires_at != claimed, 5, "a renewal")

        held = beat.hand_back_steps()
        assert held == [(current.pk, current.attempt)]
        assert release_step_leases(held) == 1
        released = reread(current).lease_expires_at

        # Holding no run and renewing no step, the heartbeat's thread ends at its next wake.
        wait_until(lambda: beat._thread is None, 5, "the heartbeat to stop renewing")
    assert reread(current).lease_expires_at == released


def _locking_selects(context: CaptureQueriesContext) -> list[str]:
    return [
        query["sql"]
        for query in context.captured_queries
        if query["sql"].startswith("SELECT")
        and (" FOR UPDATE" in query["sql"] or " FOR NO KEY UPDATE" in query["sql"])
    ]


def test_claim_step__sql_waits_briefly_on_the_one_step_row(body_log):
    step = scheduled_step({})

    with CaptureQueriesContext(connection) as context:
        claimed = claim_next_attempt(step.run_id, "slow").step

    assert claimed is not None
    statements = [query["sql"] for query in context.captured_queries]
    [select] = _locking_selects(context)
    # Waits (bounded by lock_timeout) rather than skipping: a skipped row could drop the message.
    assert select.endswith(f'FOR NO KEY UPDATE OF "{STEP_TABLE}"')
    # Then the run row, shared (compatible with other claims; a cancel waits for it).
    [share] = [sql for sql in statements if without_comments(sql).rstrip().endswith("FOR SHARE")]
    assert statements.index(select) < statements.index(share)
    assert "SKIP LOCKED" not in select
    assert "NOWAIT" not in select
    lock_timeout = [sql for sql in statements if "lock_timeout" in sql]
    assert lock_timeout and statements.index(lock_timeout[0]) < statements.index(select)


@pytest.fixture
def due_sleeps() -> list[str]:
    """Twelve queued runs parked on a 200 ms sleep, waited on until every timer is due."""

    @pw.workflow("t.napper")
    def napper(wf: pw.Workflow, input: dict) -> str:
        wf.sleep("nap", "200ms")
        return "rested"

    run_ids = [pw.start_workflow("t.napper") for _ in range(12)]
    for run_id in run_ids:
        orchestrate(run_id)
    naps = WorkflowStep.objects.filter(run_id__in=run_ids, step_key="nap")
    assert set(naps.values_list("status", flat=True)) == {StepStatus.SCHEDULED}
    wait_until(lambda: WorkflowStep.objects.due().filter(run_id__in=run_ids).count() == 12)
    return run_ids


def test_claim_due_timers__sql_skips_locked_rows(due_sleeps):
    with CaptureQueriesContext(connection) as context:
        claimed = claim_due_timers(100)

    assert len(claimed) == 12
    [select] = _locking_selects(context)
    assert f'FOR UPDATE OF "{STEP_TABLE}" SKIP LOCKED' in select


def test_claim_due_timers__racing_timer_loops_fire_each_timer_once(due_sleeps):
    outcomes = race([lambda _: [step.pk for step in claim_due_timers(5)]] * 4)

    assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)], outcomes
    fired = [pk for outcome in outcomes for pk in outcome]
    fired += [step.pk for step in claim_due_timers(100)]  # what the racers' limits left
    naps = WorkflowStep.objects.filter(run_id__in=due_sleeps, step_key="nap")
    assert sorted(fired) == sorted(naps.values_list("pk", flat=True))
    assert set(naps.values_list("status", flat=True)) == {StepStatus.SUCCEEDED}
    assert (
        WorkflowStepHistory.objects.filter(step__in=naps, status=StepStatus.SUCCEEDED).count() == 12
    )
