"""`pw.update`: the validator runs in the caller and a refusal writes nothing; an accepted update
is taken in order by `wf.receive` and answered by `wf.reply`; the same `update_id` is one
update; the caller is woken by the answer's notice; an unanswered update times out and stays; ended runs refuse updates, continued runs
forward them to their latest run."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store import notices
from pikku_workflows.models import WorkflowRun, WorkflowSignal, WorkflowUpdate
from tests.concurrency.harness import elsewhere
from tests.conftest import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def positive_price(input, state, payload):
    if payload["price"] <= 0:
        raise pw.UpdateRejected(f"price must be positive, not {payload['price']}")


@pytest.fixture
def cart() -> str:
    """Takes `add` updates, answering each with the running total, until `input["items"]`."""

    @pw.workflow("updates.cart", updates={"add": positive_price})
    def cart(wf, input):
        total = 0
        for _ in range(input["items"]):
            message = wf.receive("add")
            total += message.payload["price"]
            wf.reply(message, {"total": total, "by": message.by})
        return total

    return "updates.cart"


def drive_in_background(run_id):
    """A worker's pass of the run, on another connection, while the caller waits."""

    def drive():
        try:
            while not WorkflowUpdate.objects.filter(run_id=run_id).exists():
                time.sleep(0.01)
            orchestrate(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread


def test_update__is_answered_by_the_run(cart):
    run_id = pw.start_workflow(cart, {"items": 2}, inline=True)
    worker = drive_in_background(run_id)

    answer = pw.update(run_id, "add", {"price": 5}, timeout="20s")

    worker.join(30)
    assert answer == {"total": 5, "by": None}
    update = WorkflowUpdate.objects.get()
    assert (update.name, update.payload, update.result) == (
        "add",
        {"price": 5},
        {"total": 5, "by": None},
    )
    assert update.completed_at is not None


def test_update__the_caller_waits_for_the_answer_s_notice_not_a_poll(cart, monkeypatch):
    # Without its notice the caller would read the row again only after this long.
    monkeypatch.setattr(notices, "NOTICE_RECHECK_SECONDS", 600.0)
    run_id = pw.start_workflow(cart, {"items": 1})

    def drive_later():
        try:
            wait_until(lambda: WorkflowUpdate.objects.exists(), 10, "the update")
            time.sleep(0.3)  # the caller is waiting by now: the answer wakes it
            orchestrate(run_id)
        finally:
            connection.close()

    worker = threading.Thread(target=drive_later, daemon=True)
    worker.start()
    with CaptureQueriesContext(connection) as captured:
        answer = pw.update(run_id, "add", {"price": 5}, timeout="60s")
    worker.join(30)

    assert answer == {"total": 5, "by": None}
    statements = [query["sql"] for query in captured.captured_queries]
    listens = [sql for sql in statements if sql.startswith(("LISTEN", "UNLISTEN"))]
    assert [sql.split()[0] for sql in listens] == ["LISTEN", "UNLISTEN"]
    # Once before the answer, once after its notice: no poll in between.
    answer_read = 'SELECT "pikku_workflows_workflowupdate"."completed_at" AS "completed_at"'
    reads = [sql for sql in statements if sql.startswith(answer_read)]
    assert len(reads) == 2


def test_update__accepted_returns_its_id_and_the_run_takes_updates_in_order(cart):
    run_id = pw.start_workflow(cart, {"items": 2})

    first = pw.update(run_id, "add", {"price": 2}, wait="accepted")
    second = pw.update(run_id, "add", {"price": 3}, wait="accepted", update_id="second")
    orchestrate(run_id)

    assert second == "second"
    assert WorkflowRun.objects.get(pk=run_id).output == 5
    answers = dict(WorkflowUpdate.objects.values_list("update_id", "result"))
    assert answers == {first: {"total": 2, "by": None}, "second": {"total": 5, "by": None}}


def test_update__a_rejected_update_writes_nothing(cart):
    run_id = pw.start_workflow(cart, {"items": 1})

    with pytest.raises(pw.UpdateRejected, match="price must be positive"):
        pw.update(run_id, "add", {"price": 0})

    assert not WorkflowUpdate.objects.exists()
    assert not WorkflowSignal.objects.exists()


def test_update__a_validator_that_breaks_is_a_clear_refusal_and_writes_nothing(cart):
    run_id = pw.start_workflow(cart, {"items": 1})

    with pytest.raises(pw.UpdateRejected, match="validator of update 'add' failed"):
        pw.update(run_id, "add", {"cost": 1})  # the validator's KeyError

    assert not WorkflowUpdate.objects.exists()


@pytest.mark.parametrize(
    ("name", "payload", "error"),
    [
        ("remove", {"price": 1}, pw.InvalidInput),  # no such update
        ("add", {"price": float("nan")}, pw.InvalidInput),
    ],
)
def test_update__bad_input_is_refused_and_writes_nothing(cart, name, payload, error):
    run_id = pw.start_workflow(cart, {"items": 1})

    with pytest.raises(error):
        pw.update(run_id, name, payload)

    assert not WorkflowUpdate.objects.exists()


def test_update__the_same_update_id_is_one_update(cart):
    run_id = pw.start_workflow(cart, {"items": 3})

    ids = [pw.update(run_id, "add", {"price": 1}, wait="accepted", update_id="once") for _ in "ab"]
    orchestrate(run_id)

    assert ids == ["once", "once"]
    assert WorkflowUpdate.objects.count() == 1
    assert pw.update(run_id, "add", {"price": 1}, update_id="once") == {"total": 1, "by": None}


def test_update__unanswered_times_out_and_stays_accepted(cart):
    run_id = pw.start_workflow(cart, {"items": 1})

    with pytest.raises(pw.UpdateTimeout):
        pw.update(run_id, "add", {"price": 1}, timeout="50ms", update_id="late")

    assert WorkflowUpdate.objects.get().update_id == "late"
    orchestrate(run_id)
    assert WorkflowRun.objects.get(pk=run_id).output == 1


def test_update__to_an_ended_run_is_an_invalid_transition(cart):
    run_id = pw.start_workflow(cart, {"items": 0}, inline=True)

    with pytest.raises(pw.InvalidTransition):
        pw.update(run_id, "add", {"price": 1})

    assert not WorkflowUpdate.objects.exists()


def test_update__more_than_the_pending_limit_is_refused(cart, settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "MAX_PENDING_UPDATES": 2}
    run_id = pw.start_workflow(cart, {"items": 5})
    for _ in range(2):
        pw.update(run_id, "add", {"price": 1}, wait="accepted")

    with pytest.raises(pw.InvalidTransition, match="MAX_PENDING_UPDATES"):
        pw.update(run_id, "add", {"price": 1}, wait="accepted")

    assert WorkflowUpdate.objects.count() == 2


def test_update__to_a_continued_run_goes_to_its_successor():
    @pw.workflow("updates.chain", updates={"add": positive_price})
    def chain(wf, input):
        if input["link"] == 0:
            wf.continue_as_new({"link": 1})
        message = wf.receive("add")
        wf.reply(message, input["link"])
        return "done"

    first = pw.start_workflow("updates.chain", {"link": 0})
    kept = pw.update(first, "add", {"price": 1}, wait="accepted")  # before the hand-over
    orchestrate(first)
    successor = WorkflowRun.objects.get(continued_from_id=first)

    assert elsewhere(lambda: orchestrate(successor.pk)) is None
    assert pw.update(first, "add", {"price": 1}, update_id=kept) == 1
    assert WorkflowUpdate.objects.get().run_id == successor.pk


def queries_of(action) -> int:
    with CaptureQueriesContext(connection) as captured:
        action()
    return len(captured)


def test_update__a_pass_replays_answered_updates_without_a_query_each(cart):
    def pass_after(answered: int) -> int:
        run_id = pw.start_workflow(cart, {"items": 50})
        for _ in range(answered):
            pw.update(run_id, "add", {"price": 1}, wait="accepted")
        orchestrate(run_id)  # takes and answers them all
        assert WorkflowUpdate.objects.filter(run_id=run_id, completed_at=None).count() == 0
        pw.update(run_id, "add", {"price": 1}, wait="accepted")
        return queries_of(lambda: orchestrate(run_id))

    assert pass_after(2) == pass_after(12)


def test_update__to_the_first_run_of_a_long_chain_costs_what_a_short_one_does():
    @pw.workflow("updates.relay", updates={"add": positive_price})
    def relay(wf, input):
        if input["link"] < input["links"]:
            wf.continue_as_new({**input, "link": input["link"] + 1})
        wf.reply(wf.receive("add"), input["link"])

    def update_cost(links: int) -> int:
        first = pw.start_workflow("updates.relay", {"link": 1, "links": links}, inline=True)
        return queries_of(lambda: pw.update(first, "add", {"price": 1}, wait="accepted"))

    assert update_cost(2) == update_cost(6)
