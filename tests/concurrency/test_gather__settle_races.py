"""A gather's members settling at the same moment on different workers (threads with their own
connections, released together): exactly one of them wakes the run, the one that settled it
last, whatever the interleaving; and a member the pass settles itself while a worker settles
another never leaves the run asleep."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun
from pikku_workflows.sql import without_comments
from pikku_workflows.status import RunStatus
from tests.concurrency.harness import elsewhere, race
from tests.queue import queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MEMBERS = 8
ROUNDS = 4


class Passes:
    """Each pass of the body, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def enter(self) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture
def passes(settings) -> Passes:
    settings.PIKKU_WORKFLOWS = {"IN_PLACE": False}
    seen = Passes()

    @pw.step_function("race.member", inline=False)
    def member(data: int, ctx: pw.StepContext) -> int:
        return data

    @pw.workflow("race.fan")
    def fan(wf: pw.Workflow, input: dict) -> list:
        seen.enter()
        return wf.map("m", "race.member", list(range(MEMBERS)))

    return seen


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_gather__members_settling_at_once_wake_the_run_exactly_once(passes, round_number):
    run_id = pw.start_workflow("race.fan", {})
    orchestrate(run_id)
    assert len(queued_tasks()) == MEMBERS + 1  # the start's own message, and one per member
    OrmQ.objects.all().delete()

    outcomes = race([lambda _, i=i: tasks.execute_step(run_id, f"m[{i}]") for i in range(MEMBERS)])

    assert outcomes == [None] * MEMBERS
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, list(range(MEMBERS)))
    assert passes.count == 2  # the first pass, and the one wake
    assert queued_tasks() == []  # nobody asked for another pass


def test_gather__a_member_s_outcome_waits_its_turn_on_the_run_row(passes):
    run_id = pw.start_workflow("race.fan", {})
    orchestrate(run_id)
    with CaptureQueriesContext(connection) as queries:
        tasks.execute_step(run_id, "m[0]")
    run_table = WorkflowRun._meta.db_table
    locks = [
        without_comments(query["sql"])
        for query in queries.captured_queries
        if "FOR NO KEY UPDATE" in query["sql"] and run_table in query["sql"]
    ]
    # Waiting, not skipping: a member that skipped could miss being the last.
    assert len(locks) == 1 and "SKIP LOCKED" not in locks[0], locks


def test_gather__the_pass_settling_the_last_member_reads_the_others_again(passes):
    # Pass 2 retries the in-process member; while it runs, a worker settles the queued one and,
    # finding the in-process one still running, wakes nobody. The pass's own write is then the
    # gather's last: it reads the other member again and completes the run in this pass.
    from datetime import timedelta

    from pikku_workflows.engine.operations.timers import shift_timers

    settled_by_the_worker: list = []

    @pw.step_function("race.local")
    def local(data: int, ctx: pw.StepContext) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("not yet")
        elsewhere(lambda: tasks.execute_step(ctx.run_id, "q"))
        settled_by_the_worker.append(True)
        return data

    @pw.workflow("race.mixed")
    def mixed(wf: pw.Workflow, input: dict) -> list:
        passes.enter()
        return wf.gather(
            wf.call("p", "race.local", 1, retry_delay="1h"), wf.call("q", "race.member", 2)
        )

    run_id = pw.start_workflow("race.mixed", {})
    orchestrate(run_id)  # pass 1: p fails (retry in an hour), q dispatched
    OrmQ.objects.all().delete()
    shift_timers([run_id], timedelta(hours=2))
    orchestrate(run_id)  # pass 2: p's retry, q settled meanwhile

    assert settled_by_the_worker == [True]
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, [1, 2])
    assert passes.count == 2
    assert queued_tasks() == []  # the worker that settled q asked for no pass
