"""Approvals and signals on whichever database the suite runs on (SQLite too, the embedded
default): the JSON lookups, the clock and the locks the engine uses there hold up."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.status import ApprovalStatus, RunStatus
from tests.approvals import approval_of, finished, past_deadline, person, register_gate, start

pytestmark = pytest.mark.django_db(transaction=True)


def test_approval__four_eyes_after_a_fork_and_a_decision_complete_the_run():
    starter, forker, boss = person("starter"), person("forker"), person("boss")
    register_gate(exclude_requester=True, expires_in="1h")
    run_id = start(by=starter)
    pw.cancel_run(run_id)
    fork_id = pw.fork_run(run_id, from_step="gate", by=forker)
    finished(fork_id)
    approval = approval_of(fork_id)

    with pytest.raises(pw.ApprovalForbidden):
        pw.decide_approval(approval.pk, approve=True, by=forker)
    pw.decide_approval(approval.pk, approve=True, by=boss, comment="ok")

    run = finished(fork_id)
    assert (run.status, run.output["decided_by"]) == (RunStatus.COMPLETED, "boss")
    assert approval_of(run_id).status == ApprovalStatus.CANCELLED


def test_approval__a_deadline_passed_on_the_database_clock_expires_it():
    register_gate(expires_in="1h", on_expire="approve")
    run_id = start()
    past_deadline(approval_of(run_id))

    assert fire_due_timers() == 1

    assert finished(run_id).output["status"] == "expired"


def test_signals__kept_before_the_wait_then_delivered_to_it():
    @pw.workflow("any_database.signals")
    def signals(wf, input):
        return [wf.wait_for_signal("a", "tick"), wf.wait_for_signal("b", "tick")]

    run_id = pw.start_workflow("any_database.signals", {})
    pw.send_signal(run_id, "tick", 1)
    finished(run_id)
    pw.send_signal(run_id, "tick", 2)

    assert finished(run_id).output == [1, 2]
