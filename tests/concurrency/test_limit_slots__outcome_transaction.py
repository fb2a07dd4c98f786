"""A `max_running` slot is freed in the transaction that records its attempt's outcome, on every
path: read from another connection, the outcome is never committed while the slot still exists,
nor the slot gone while the outcome is not committed.

The attempt's code takes two row locks from other connections before it returns: the step's row
(the recording transaction waits before its first write) and the limit's count row (it waits
after writing the outcome, before freeing the slot). An observer on a third connection sees the
recording transaction wait on each in turn, reads the step and its slot at each pause, and lets
it go on; after the commit both have changed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.engine.operations.step_execution import execute_queued_step
from pikku_workflows.models import WorkflowSlot, WorkflowSlotCount, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.tasks import orchestrate
from tests.faults import HeldRowLock, backend_pid
from tests.queue import queued_tasks
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LIMIT = "slots.atomic"
RULE = f"limit:{LIMIT}"
WAIT_SECONDS = 10


@dataclass
class Sight:
    """The step and its slot as another connection reads them."""

    status: str
    slots: int
    held: int


def _sight(step_id: Any) -> Sight:
    return Sight(
        status=WorkflowStep.objects.values_list("status", flat=True).get(pk=step_id),
        slots=WorkflowSlot.objects.filter(step_id=step_id).count(),
        held=WorkflowSlotCount.objects.values_list("held", flat=True).get(rule=RULE),
    )


def _blocking_pids(pid: int) -> set[int]:
    """Every backend `pid` waits on, directly or behind another waiter (the lease heartbeat's
    renewal of the same step row may queue for the lock ahead of the recorder)."""
    blocking: set[int] = set()
    waiting = [pid]
    with connection.cursor() as cursor:
        while waiting:
            cursor.execute("SELECT pg_blocking_pids(%s)", [waiting.pop()])
            found = set(cursor.fetchone()[0]) - blocking
            blocking |= found
            waiting.extend(found)
    return blocking


class PidHeldRowLock(HeldRowLock):
    """A HeldRowLock that notes its backend's pid (what the recording transaction waits on)."""

    pid = 0

    def _hold(self) -> None:
        self.pid = backend_pid()
        super()._hold()


@dataclass
class Observer:
    """Started by the attempt's code just before it returns: waits for the recording
    transaction (backend `recorder`) to wait on each lock in turn, reads the step at each
    pause from its own connection, then lets it go on."""

    step_id: Any
    recorder: int
    locks: list[PidHeldRowLock]
    sights: list[Sight] = field(default_factory=list)
    error: BaseException | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._observe, daemon=True)
        thread.start()
        return thread

    def _observe(self) -> None:
        try:
            for lock in self.locks:
                self._wait_until_blocked_by(lock.pid)
                self.sights.append(_sight(self.step_id))
                lock.release()
        except BaseException as exc:
            self.error = exc
            for lock in self.locks:
                lock.release()
        finally:
            connection.close()

    def _wait_until_blocked_by(self, holder: int) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while holder not in _blocking_pids(self.recorder):
            assert time.monotonic() < deadline, f"the recorder never waited on {holder}"
            time.sleep(0.01)


class Pauses:
    """What the attempt's code calls last: hold the step's row and the limit's count row from
    other connections and start the observer."""

    def __init__(self) -> None:
        self.observer: Observer | None = None
        self.thread: threading.Thread | None = None

    def hold(self, ctx: pw.StepContext) -> None:
        step_row = PidHeldRowLock(
            f"SELECT 1 FROM {WorkflowStep._meta.db_table} WHERE id = %s FOR UPDATE",
            [ctx.step_id],
        )
        count_row = PidHeldRowLock(
            f"SELECT 1 FROM {WorkflowSlotCount._meta.db_table} WHERE rule = %s FOR UPDATE",
            [RULE],
        )
        step_row.__enter__()
        count_row.__enter__()
        self.observer = Observer(ctx.step_id, backend_pid(), [step_row, count_row])
        self.thread = self.observer.start()

    def sights(self) -> list[Sight]:
        assert self.thread is not None and self.observer is not None, "the code never paused"
        self.thread.join(WAIT_SECONDS * 3)
        if self.observer.error is not None:
            raise self.observer.error
        return self.observer.sights


def _define(name: str, body, *, inline: bool = False, **options: Any) -> None:
    pw.define_limit(LIMIT, max_running=1)
    pw.step_function(name, inline=inline, limits=[LIMIT], **options)(body)


def _still_running_with_its_slot(sights: list[Sight]) -> None:
    # Paused before its first write, then between the outcome's write and the slot's delete:
    # the other connection sees neither change at both pauses.
    assert sights == [Sight(StepStatus.RUNNING, 1, 1), Sight(StepStatus.RUNNING, 1, 1)]


def _step_workflow(name: str, function: str, **options: Any) -> None:
    @pw.workflow(name)
    def body(wf, input):
        return wf.do("call", function, input, **options)


@pytest.mark.parametrize(
    ("path", "options", "status_after"),
    [
        ("success", {"retries": 0}, StepStatus.SUCCEEDED),
        ("retry_scheduled", {"retries": 2}, StepStatus.FAILED),
        ("failed_for_good", {"retries": 0}, StepStatus.FAILED),
        ("rate_limited", {"retries": 0}, StepStatus.FAILED),
        ("timeout", {"retries": 0, "timeout": "1s"}, StepStatus.FAILED),
    ],
)
def test_queued_attempt__its_outcome_and_its_freed_slot_commit_together(
    settings, path, options, status_after
):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pauses = Pauses()

    def call(data, ctx):
        pauses.hold(ctx)
        if path == "success":
            return "done"
        if path == "rate_limited":
            raise pw.RateLimited(retry_after="5s")
        if path == "timeout":
            time.sleep(5)  # the step's timeout stops it
        raise RuntimeError("upstream down")

    _define("slots.atomic_call", call)
    _step_workflow("slots.atomic_sync", "slots.atomic_call", **options)
    run_id = pw.start_workflow("slots.atomic_sync", {})
    orchestrate(run_id)

    execute_queued_step(run_id, "call")

    _still_running_with_its_slot(pauses.sights())
    after = _sight(load_step(run_id, "call").pk)
    assert after == Sight(status_after, 0, 0)
    if path == "rate_limited":
        assert load_step(run_id, "call").error["code"] == "RATE_LIMITED"
    if path == "timeout":
        assert load_step(run_id, "call").error["code"] == "TIMEOUT"


def test_in_pass_attempt__its_success_and_its_freed_slot_commit_before_the_next_step():
    # Without a limit the pass keeps a success for the write that creates its next step; a
    # success holding a slot is written at once, with its slot freed in the same transaction.
    pauses = Pauses()

    def call(data, ctx):
        pauses.hold(ctx)
        return "done"

    _define("slots.atomic_local", call, inline=True)

    @pw.workflow("slots.atomic_two_steps")
    def body(wf, input):
        first = wf.do("first", "slots.atomic_local", input, retries=0)
        return wf.do("second", lambda: first)

    run_id = pw.start_workflow("slots.atomic_two_steps", {}, inline=True)

    _still_running_with_its_slot(pauses.sights())
    assert load_run(run_id).status == RunStatus.COMPLETED
    assert _sight(load_step(run_id, "first").pk) == Sight(StepStatus.SUCCEEDED, 0, 0)


def test_atomic_attempt__its_writes_outcome_and_freed_slot_commit_together(settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pauses = Pauses()

    def call(data, ctx):
        pauses.hold(ctx)
        return "done"

    _define("slots.atomic_writes", call, atomic=True)
    _step_workflow("slots.atomic_tx", "slots.atomic_writes", retries=0)
    run_id = pw.start_workflow("slots.atomic_tx", {})
    orchestrate(run_id)

    execute_queued_step(run_id, "call")

    _still_running_with_its_slot(pauses.sights())
    assert _sight(load_step(run_id, "call").pk) == Sight(StepStatus.SUCCEEDED, 0, 0)


def test_freed_slot__is_handed_to_the_waiting_step_in_the_recording_transaction(settings):
    # A second run's step waits for the only slot; the attempt holding it records its outcome,
    # and the waiting step holds the slot (and has its message) from the same commit on.
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pauses = Pauses()

    def call(data, ctx):
        if data["n"] == 1:
            execute_queued_step(data["other"], "call")  # finds the limit full: waits
            pauses.hold(ctx)
        return data["n"]

    _define("slots.atomic_handed", call)
    _step_workflow("slots.atomic_queue", "slots.atomic_handed", retries=0)
    second = pw.start_workflow("slots.atomic_queue", {"n": 2})
    first = pw.start_workflow("slots.atomic_queue", {"n": 1, "other": second})
    orchestrate(second)
    orchestrate(first)

    execute_queued_step(first, "call")

    _still_running_with_its_slot(pauses.sights())
    waiting = load_step(second, "call")
    assert WorkflowSlot.objects.get().step_id == waiting.pk
    assert waiting.status == StepStatus.PENDING and waiting.admission_hold is None
    assert load_step(first, "call").status == StepStatus.SUCCEEDED
    assert ("pikku_workflows.tasks.execute_step", (second, "call")) in queued_tasks()
