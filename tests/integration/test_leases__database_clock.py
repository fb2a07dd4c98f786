"""Leases, lapses and due times are computed and judged on the database clock: a process whose
own clock runs ahead or behind neither steals a live step nor arms a timer in the wrong place"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.faults import database_now
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SKEW = 120  # seconds: an NTP outage's worth


@pytest.fixture
def work() -> dict:
    state: dict = {"calls": [], "release": threading.Event(), "entered": threading.Event()}

    @pw.step_function("clock.work")
    def work_step(data: dict, ctx: pw.StepContext) -> str:
        state["calls"].append(ctx.attempt)
        state["entered"].set()
        state["release"].wait(10)
        return "worked"

    @pw.step_function("clock.flaky", inline=False)
    def flaky(data: dict, ctx: pw.StepContext) -> str:
        raise RuntimeError("try again")

    @pw.workflow("clock.one")
    def one(wf: pw.Workflow, input: dict) -> str:
        return wf.do("work", "clock.work", {}, retries=2)

    @pw.workflow("clock.retrying")
    def retrying(wf: pw.Workflow, input: dict) -> str:
        return wf.do("flaky", "clock.flaky", {}, retries=3, retry_delay="100ms")

    @pw.workflow("clock.napping")
    def napping(wf: pw.Workflow, input: dict) -> str:
        wf.sleep("nap", "1s")
        return "rested"

    return state


def run_in_thread(run_id: str) -> threading.Thread:
    def drive() -> None:
        try:
            tasks.orchestrate(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread


def test_step_lease__a_pass_whose_clock_runs_ahead_leaves_a_live_step_alone(work, skewed_clock):
    run_id = pw.start_workflow("clock.one", {})
    first = run_in_thread(run_id)
    assert work["entered"].wait(10)
    # The first pass's process froze: its run lease lapsed, its step lease has time left.
    WorkflowRun.objects.filter(pk=run_id).update(lease_holder=None, lease_expires_at=None)
    skewed_clock(SKEW)

    tasks.orchestrate(run_id)  # a second pass, on a machine whose clock is 2 minutes ahead

    assert work["calls"] == [1]  # the live step was not run again
    step = WorkflowStep.objects.get(run_id=run_id, step_key="work")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    work["release"].set()
    first.join(10)


def test_step_lease__a_process_whose_clock_runs_behind_writes_a_live_lease(work, skewed_clock):
    skewed_clock(-SKEW)
    run_id = pw.start_workflow("clock.one", {})
    first = run_in_thread(run_id)
    assert work["entered"].wait(10)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="work")
    left = step.lease_expires_at - database_now()
    assert timedelta(seconds=30) < left <= timedelta(seconds=60)  # STEP_LEASE_SECONDS ahead
    assert not WorkflowStep.objects.filter(run_id=run_id).lease_lapsed().exists()
    work["release"].set()
    first.join(10)
    assert WorkflowRun.objects.get(pk=run_id).output == "worked"


def test_retry_backoff__is_due_on_the_database_clock(work, skewed_clock):
    skewed_clock(SKEW)
    run_id = pw.start_workflow("clock.retrying", {})

    tasks.orchestrate(run_id)
    tasks.execute_step(run_id, "flaky")

    step = WorkflowStep.objects.get(run_id=run_id, step_key="flaky")
    assert step.status == StepStatus.FAILED
    assert step.wake_at - database_now() < timedelta(seconds=5)  # 100 ms, not 2 minutes away


def test_sleep__wakes_on_the_database_clock(work, skewed_clock):
    skewed_clock(SKEW)
    run_id = pw.start_workflow("clock.napping", {})

    tasks.orchestrate(run_id)

    step = WorkflowStep.objects.get(run_id=run_id, step_key="nap")
    assert step.wake_at - database_now() < timedelta(seconds=5)
    wait_until(lambda: pw.recover()["timers"], 10, "the sleep to come due")
    drain_queue()
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
