"""Approvals and signals under real concurrent transactions: 25 deciders at once settle an
approval exactly once; a decision racing its deadline and the timer loop ends one way only; a
decider waits for the timer loop that holds the approval's step; a signal sent while its wait
is being created is never lost; a cancel racing a decision leaves one consistent story."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.claims import lock_due_reminders_txn
from pikku_workflows.models import (
    WorkflowApproval,
    WorkflowApprovalDecision,
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
    WorkflowStepHistory,
)
from pikku_workflows.sql import without_comments
from pikku_workflows.status import ApprovalStatus, RunStatus, StepStatus
from tests.approvals import approval_of, finished, person, register_gate, start
from tests.concurrency.harness import race
from tests.concurrency.test_claims__cancel_races import Contender
from tests.conftest import wait_until
from tests.faults import HeldRowLock, database_now, is_waiting_on_a_lock
from tests.queue import queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DECIDERS = 25


def deciders(count: int, group: str = "board") -> list:
    return [person(f"decider{n:02d}", group) for n in range(count)]


def outcomes_by_kind(outcomes: list) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for outcome in outcomes:
        kind = outcome["status"] if isinstance(outcome, dict) else type(outcome).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def settled_once(approval: WorkflowApproval) -> None:
    """The approval's step left `waiting` once: one history row, one outcome, one pass asked."""
    history = list(WorkflowStepHistory.objects.filter(step_id=approval.step_id))
    assert [(h.attempt, h.status) for h in history] == [(1, StepStatus.SUCCEEDED)]
    assert queued_tasks() == [("pikku_workflows.tasks.orchestrate", (str(approval.run_id),))]


def test_25_concurrent_deciders__exactly_one_settles_an_any_approval():
    people = deciders(DECIDERS)
    register_gate(approvers=["group:board"])
    run_id = start()
    approval = approval_of(run_id)

    outcomes = race(
        [
            lambda _, user=user: pw.decide_approval(approval.pk, approve=True, by=user)
            for user in people
        ]
    )

    assert outcomes_by_kind(outcomes) == {"approved": 1, "ApprovalResolved": DECIDERS - 1}
    (winner,) = [o for o in outcomes if isinstance(o, dict)]
    assert WorkflowApprovalDecision.objects.count() == 1
    assert WorkflowAuditEntry.objects.filter(action="approve").count() == 1
    approval.refresh_from_db()
    assert approval.decided_by.username == winner["decided_by"]
    settled_once(approval)
    assert finished(run_id).output["decided_by"] == winner["decided_by"]


def test_25_concurrent_deciders__a_quorum_of_five_counts_five_and_settles_once():
    people = deciders(DECIDERS)
    register_gate(approvers=["group:board"], policy="quorum", quorum=5)
    run_id = start()
    approval = approval_of(run_id)

    outcomes = race(
        [
            lambda _, user=user: pw.decide_approval(approval.pk, approve=True, by=user)
            for user in people
        ]
    )

    assert outcomes_by_kind(outcomes) == {
        "pending": 4,
        "approved": 1,
        "ApprovalResolved": DECIDERS - 5,
    }
    assert WorkflowApprovalDecision.objects.count() == 5
    settled_once(approval)
    output = finished(run_id).output
    assert len(output["users"]) == 5 and output["decided_by"] == output["users"][-1]


@pytest.mark.parametrize("ahead_ms", [0, 20, 40, 80, 300])
def test_decision_racing_the_deadline_and_the_timer__ends_one_way(ahead_ms):
    boss = person("boss")
    register_gate(expires_in="1h")
    run_id = start()
    approval = approval_of(run_id)
    # The deadline lands while the contenders run (from "already" to "after the decision").
    deadline = database_now() + timedelta(milliseconds=ahead_ms)
    WorkflowApproval.objects.filter(pk=approval.pk).update(expires_at=deadline)
    WorkflowStep.objects.filter(pk=approval.step_id).update(wake_at=deadline)

    def timer(_):
        while True:  # the timer loop, ticking until the deadline is due
            if fire_due_timers() or not WorkflowApproval.objects.get(pk=approval.pk).is_pending:
                return "fired"

    decision, ticked = race(
        [lambda _: pw.decide_approval(approval.pk, approve=True, by=boss), timer]
    )

    assert ticked == "fired", ticked

    approval.refresh_from_db()
    step = WorkflowStep.objects.get(pk=approval.step_id)
    assert step.status == StepStatus.SUCCEEDED
    if isinstance(decision, dict):
        # The decision was written before the deadline: it won, and the timer changed nothing.
        assert approval.status == ApprovalStatus.APPROVED
        assert approval.decisions.get().created_at < approval.expires_at
        assert step.result["status"] == "approved"
    else:
        assert isinstance(decision, pw.ApprovalResolved), decision
        assert approval.status == ApprovalStatus.EXPIRED
        assert not approval.decisions.exists()
        assert step.result["status"] == "expired"
    assert WorkflowStepHistory.objects.filter(step=step).count() == 1
    assert finished(run_id).output["status"] == approval.status


def test_decider__waits_for_the_timer_loop_holding_the_step_then_sees_the_deadline():
    boss = person("boss")
    register_gate(expires_in="1h")
    approval = approval_of(start())
    step_table = WorkflowStep._meta.db_table
    outcome: dict = {}

    with HeldRowLock(
        f"SELECT 1 FROM {step_table} WHERE id = %s FOR UPDATE", [approval.step_id]
    ) as held:

        def decide():
            try:
                outcome["value"] = pw.decide_approval(approval.pk, approve=True, by=boss)
            except pw.WorkflowError as exc:
                outcome["value"] = exc

        contender = Contender(decide)
        wait_until(lambda: is_waiting_on_a_lock(contender.pid), what="the decider to wait")
        # Meanwhile the deadline passes (the holder, like the timer loop, has not decided yet).
        past = database_now() - timedelta(seconds=1)
        WorkflowApproval.objects.filter(pk=approval.pk).update(expires_at=past)
        held.release()
        contender.join()

    assert isinstance(outcome["value"], pw.ApprovalResolved)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED


@pytest.mark.parametrize("attempt", range(4))
def test_signal_sent_while_its_wait_is_created__is_never_lost(attempt):
    @pw.workflow("races.signal")
    def signalled(wf, input):
        return wf.wait_for_signal("go", "go")

    run_id = pw.start_workflow("races.signal", {})  # queued: its pass has not run

    race([lambda _: orchestrate(run_id), lambda _: pw.send_signal(run_id, "go", attempt)])

    run = finished(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, attempt)
    step = WorkflowStep.objects.get(run_id=run_id, step_key="go")
    assert step.result == attempt


def test_signal__waits_for_a_pass_holding_the_run_while_it_creates_a_wait():
    # The pass creates a wait under FOR NO KEY UPDATE of the run (lock_running_run_txn): a
    # signal sent meanwhile waits for that commit, then finds the wait (never misses it).
    @pw.workflow("races.held")
    def held(wf, input):
        return wf.wait_for_signal("go", "go")

    run_id = pw.start_workflow("races.held", {})
    run_table = WorkflowRun._meta.db_table
    lock = f"SELECT 1 FROM {run_table} WHERE id = %s FOR NO KEY UPDATE"

    with HeldRowLock(lock, [run_id]) as holder:
        sender = Contender(lambda: pw.send_signal(run_id, "go", "late"))
        wait_until(lambda: is_waiting_on_a_lock(sender.pid), what="the signal to wait")
        holder.release()
        sender.join()

    assert sender.error is None, sender.error
    assert finished(run_id).output == "late"


def test_cancel_racing_a_decision__one_consistent_story():
    people = deciders(3)
    register_gate(approvers=["group:board"])
    run_id = start()
    approval = approval_of(run_id)

    outcomes = race(
        [
            lambda _: pw.cancel_run(run_id, reason="customer called"),
            *[
                (lambda _, user=user: pw.decide_approval(approval.pk, approve=True, by=user))
                for user in people
            ],
        ]
    )

    assert not isinstance(outcomes[0], Exception), outcomes[0]
    approval.refresh_from_db()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    decided = [o for o in outcomes[1:] if isinstance(o, dict)]
    if approval.status == ApprovalStatus.APPROVED:
        assert len(decided) == 1 and approval.decisions.count() == 1
    else:
        assert approval.status == ApprovalStatus.CANCELLED
        assert decided == [] and not approval.decisions.exists()
    assert all(isinstance(o, dict | pw.ApprovalResolved) for o in outcomes[1:]), outcomes


def test_reminders__the_batch_skips_rows_another_timer_loop_holds():
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        lock_due_reminders_txn(10)

    (statement,) = [q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"]]
    table = WorkflowApproval._meta.db_table
    assert without_comments(statement).endswith(f'FOR UPDATE OF "{table}" SKIP LOCKED')
