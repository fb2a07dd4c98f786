"""A cancel racing a claim or a step insert: while the cancel's transaction holds the run row,
the claim and the guarded insert wait for it (their row lock on the run), then see the run
cancelled and start nothing. Without that lock they would read the run as still running and
start a step of a cancelled run."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.concurrency.harness import JOIN_TIMEOUT
from tests.conftest import wait_until
from tests.faults import HeldRowLock, backend_pid, is_waiting_on_a_lock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CANCEL = f"UPDATE {WorkflowRun._meta.db_table} SET status = 'cancelled' WHERE id = %s"


class Contender:
    """`work` in a thread of its own, with its own connection; its backend pid is known first."""

    def __init__(self, work: Any) -> None:
        self.pid: int | None = None
        self.error: BaseException | None = None
        self._known = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()
        assert self._known.wait(10)

    def _run(self, work: Any) -> None:
        try:
            self.pid = backend_pid()
            self._known.set()
            work()
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> None:
        self._thread.join(JOIN_TIMEOUT)
        assert not self._thread.is_alive(), "the contender hung"


class Calls:
    """The step functions' calls; `first` blocks until `gate` is set."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.gate = threading.Event()


@pytest.fixture
def calls() -> Calls:
    state = Calls()

    @pw.step_function("race.queued", inline=False)
    def queued(data: Any, ctx: pw.StepContext) -> str:
        state.made.append(ctx.step_key)
        return "ran"

    @pw.step_function("race.first")
    def first(data: Any, ctx: pw.StepContext) -> str:
        state.made.append(ctx.step_key)
        state.gate.wait(10)
        return "first"

    @pw.step_function("race.second")
    def second(data: Any, ctx: pw.StepContext) -> str:
        state.made.append(ctx.step_key)
        return "second"

    @pw.workflow("race.one_queued")
    def one_queued(wf: pw.Workflow, input: Any) -> str:
        return wf.do("queued", "race.queued", {})

    @pw.workflow("race.two_local")
    def two_local(wf: pw.Workflow, input: Any) -> list:
        return [wf.do("first", "race.first", {}), wf.do("second", "race.second", {})]

    return state


def wait_until_blocked(contender: Contender) -> None:
    # It either waits on the cancel's row lock (as it must), or it did not wait and is done.
    wait_until(lambda: is_waiting_on_a_lock(contender.pid) or contender.done, 10)


def test_cancel_vs_claim__the_claim_waits_for_the_cancel_then_claims_nothing(
    calls, through_the_queue
):
    run_id = pw.start_workflow("race.one_queued", {})
    tasks.orchestrate(run_id)  # the step is scheduled; its message waits for a worker

    with HeldRowLock(CANCEL, [run_id]) as cancel:
        worker = Contender(lambda: tasks.execute_step(run_id, "queued"))
        wait_until_blocked(worker)
        cancel.release()  # the cancel commits
    worker.join()

    assert worker.error is None
    assert calls.made == []
    step = WorkflowStep.objects.get(run_id=run_id, step_key="queued")
    assert step.status == StepStatus.SCHEDULED
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.CANCELLED


def test_cancel_vs_step_insert__the_next_step_waits_for_the_cancel_then_is_not_made(calls):
    run_id = pw.start_workflow("race.two_local", {})
    driver = Contender(lambda: tasks.orchestrate(run_id))
    wait_until(lambda: calls.made == ["first"], 10, "the first step to start")

    with HeldRowLock(CANCEL, [run_id]) as cancel:
        calls.gate.set()  # the first step returns; the pass goes on to insert the second
        wait_until_blocked(driver)
        cancel.release()
    driver.join()

    assert driver.error is None
    assert calls.made == ["first"]
    assert not WorkflowStep.objects.filter(run_id=run_id, step_key="second").exists()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
