"""What an update costs in statements, pinned so it cannot creep back: the caller's accept, the
pass that answers it, and a worker's pass that takes the next update in place at `wf.receive`
(no new pass, no replay of the link)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.engine.operations.step_execution import run_pass
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Round trips, BEGIN and COMMIT included. The accept of an update a `wf.receive` is waiting for:
# the chain and its latest run (1); in one transaction (2) the run's lock (1), the update kept
# (1), its hand-over to the wait (1: the step, its history row, the signal), the audit row with
# the wake and the run's next pass (1).
ACCEPT_STATEMENTS = 7
# A pass that answers one update: the run (1), its lease (1), its steps (1), its answered
# updates (1), the answer (1), the next wait in one transaction (2): the lease checked under the
# run's lock (1), the step and its history row (2), a kept update handed to it (1); the lease's
# release (1).
PASS_STATEMENTS = 12
# Each update a worker's pass takes in place at its `wf.receive`: the step read after the wake
# (1), the answer (1), the next wait in one transaction (6, as above).
IN_PLACE_STATEMENTS = 8


@pytest.fixture
def cart() -> str:
    @pw.workflow("statements.cart", updates={"add": lambda input, state, payload: None})
    def cart(wf, input):
        total = 0
        for _ in range(input["items"]):
            message = wf.receive("add")
            total += message.payload["price"]
            wf.reply(message, total)
        return total

    return "statements.cart"


def statements_of(action) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        action()
    return [query["sql"] for query in captured.captured_queries]


def parked_at_receive(run_id) -> bool:
    return WorkflowStep.objects.filter(run_id=run_id, status=StepStatus.WAITING).exists()


def test_accept__of_an_update_a_receive_waits_for(cart):
    run_id = pw.start_workflow(cart, {"items": 3})
    orchestrate(run_id)
    pw.update(run_id, "add", {"price": 1}, wait="accepted")
    orchestrate(run_id)
    assert parked_at_receive(run_id)

    accept = statements_of(lambda: pw.update(run_id, "add", {"price": 1}, wait="accepted"))

    assert len(accept) == ACCEPT_STATEMENTS, "\n".join(accept)
    assert not parked_at_receive(run_id)  # the accept handed it to the wait


def test_pass__that_answers_an_update(cart):
    run_id = pw.start_workflow(cart, {"items": 3})
    orchestrate(run_id)
    pw.update(run_id, "add", {"price": 1}, wait="accepted")

    answering = statements_of(lambda: orchestrate(run_id))

    assert len(answering) == PASS_STATEMENTS, "\n".join(answering)
    assert parked_at_receive(run_id)


def worker_statements(run_id, updates: int) -> list[str]:
    """The statements of one worker's pass of the run while a caller sends it `updates`
    updates, each once the pass waits at its `wf.receive` (so each is handed over in place)."""
    captured: list[str] = []

    def work():
        try:
            captured.extend(statements_of(lambda: run_pass(run_id)))
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    for price in range(1, updates + 1):
        wait_until(lambda: parked_at_receive(run_id), 10, "the pass waiting at wf.receive")
        assert pw.update(run_id, "add", {"price": price}, timeout="10s") == price * (price + 1) / 2
    worker.join(10)
    assert not worker.is_alive()
    return captured


def test_worker_pass__takes_the_next_updates_in_place(cart, settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "RECEIVE_HOLD_SECONDS": 10}
    two, four = (pw.start_workflow(cart, {"items": items}) for items in (2, 4))
    messages = OrmQ.objects.count()

    short, long = worker_statements(two, 2), worker_statements(four, 4)

    # Each update asked the pass holding the lease for one more pass, not the queue for one.
    assert OrmQ.objects.count() == messages

    for run_id in (two, four):
        assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    # One pass (one lease taken, the steps read once), however many updates it took.
    takes_lease = 'UPDATE "pikku_workflows_workflowrun" SET "lease_holder" = \''
    for statements in (short, long):
        assert sum(sql.startswith(takes_lease) for sql in statements) == 1
    assert (len(long) - len(short)) / 2 == IN_PLACE_STATEMENTS, "\n".join(long)


def test_worker_pass__with_nothing_to_take_parks_when_its_wait_runs_out(cart, settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "RECEIVE_HOLD_SECONDS": 0.2}
    run_id = pw.start_workflow(cart, {"items": 2})

    statements = statements_of(lambda: run_pass(run_id))

    assert parked_at_receive(run_id)
    assert [sql.split()[0] for sql in statements if "LISTEN" in sql.split()[0]] == [
        "LISTEN",
        "UNLISTEN",
    ]
    assert WorkflowRun.objects.get(pk=run_id).lease_holder is None


def test_worker_pass__without_a_hold_parks_at_once(cart, settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "RECEIVE_HOLD_SECONDS": 0}
    run_id = pw.start_workflow(cart, {"items": 2})

    statements = statements_of(lambda: run_pass(run_id))

    assert parked_at_receive(run_id)
    assert not any(sql.startswith("LISTEN") for sql in statements)
    assert WorkflowRun.objects.get(pk=run_id).lease_holder is None
