"""kill -9 of the worker in the middle of `wf.continue_as_new`'s transaction, and again in its retry,
while a client sends updates and signals to the chain: every update is taken once and answered
once, every signal taken once, in the order sent, and each link has exactly one successor."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowSignal, WorkflowUpdate
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.faults import sleeping_backends, slowed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

ITEMS = 12  # updates, and as many signals
STEPS_PER_LINK = 4  # a receive and a signal wait per item: two items per link
KILLS = 2  # the hand-over, then its retry: a third kill would repeat the second
HAND_OVER_SECONDS = 1.0  # each hand-over's transaction stays open this long: the kill's window


def send_updates_and_signals(run_id: str, errors: list[BaseException]) -> threading.Thread:
    """A client sending `add` updates (not waiting for their answers) and `note` signals in
    turns, spread over the test, to the chain's first run (forwarded to its latest)."""

    def send() -> None:
        try:
            for item in range(ITEMS):
                pw.update(run_id, "add", item, wait="accepted", update_id=f"add-{item}")
                pw.send_signal(run_id, "note", item)
                time.sleep(0.3)
        except BaseException as exc:  # the test fails on it after joining
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def chain_of(run_id: str) -> list[WorkflowRun]:
    chain = [WorkflowRun.objects.get(pk=run_id)]
    while (successor := WorkflowRun.objects.filter(continued_from=chain[-1]).first()) is not None:
        chain.append(successor)
    return chain


def test_worker__kills_during_hand_overs_lose_no_update_or_signal(start_worker):
    successor_insert = "NEW.continued_from_id IS NOT NULL"
    with slowed("pikku_workflows_workflowrun", seconds=HAND_OVER_SECONDS, when=successor_insert):
        worker = start_worker()
        first = pw.start_workflow(
            "e2e.cart_chain", {"items": [], "notes": [], "expect": ITEMS, "link": STEPS_PER_LINK}
        )
        errors: list[BaseException] = []
        client = send_updates_and_signals(first, errors)

        for kill in range(KILLS):
            wait_until(sleeping_backends, 90, f"hand-over {kill + 1} to be under way")
            links = len(chain_of(first))
            worker.kill_group()  # inside the hand-over's transaction
            wait_until(lambda: not sleeping_backends(), 10, "the killed hand-over to roll back")
            # Nothing of it committed: the run is still the chain's latest, running.
            assert len(chain_of(first)) == links
            assert chain_of(first)[-1].status == RunStatus.RUNNING
            worker = start_worker()

        client.join(60)
        assert not client.is_alive() and errors == []
        # The same update id again is the same update: its answer, once the run gave it.
        answers = [
            pw.update(first, "add", item, update_id=f"add-{item}", timeout="120s")
            for item in range(ITEMS)
        ]
        last = wait_until(
            lambda: chain_of(first)[-1] if chain_of(first)[-1].status != "running" else None,
            120,
            "the chain to end",
        )

    assert answers == [{"position": item + 1} for item in range(ITEMS)]
    assert last.status == RunStatus.COMPLETED
    assert last.output == {"items": list(range(ITEMS)), "notes": list(range(ITEMS))}
    chain = chain_of(first)
    # Two items per link: every link but the last handed over to exactly one successor, and no
    # run of the workflow stands outside the chain (a hand-over rolled back left nothing).
    assert len(chain) == ITEMS // 2
    assert [run.status for run in chain[:-1]] == [RunStatus.CONTINUED] * (len(chain) - 1)
    assert WorkflowRun.objects.filter(workflow="e2e.cart_chain").count() == len(chain)
    # Each update one row, answered; each signal (updates travel as signals too) taken once.
    updates = WorkflowUpdate.objects.order_by("id")
    assert [update.update_id for update in updates] == [f"add-{item}" for item in range(ITEMS)]
    assert all(update.completed_at is not None for update in updates)
    signals = WorkflowSignal.objects.all()
    assert signals.count() == 2 * ITEMS
    assert not signals.filter(consumed_at__isnull=True).exists()
    assert len({signal.consumed_by_step_id for signal in signals}) == 2 * ITEMS
