"""The run row's list fields follow the run through the engine: the write that ends a pass or
moves the run recomputes them from its steps, and they say what the run's own summary says."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db


def listed(run: WorkflowRun) -> tuple[Any, ...]:
    row = WorkflowRun.objects.get(pk=run.pk)
    return (
        row.steps_total,
        row.steps_done,
        row.current_step_key,
        row.waiting_on,
        row.last_error_code,
    )


def summary_wait(run: WorkflowRun) -> tuple[str | None, str | None]:
    waiting = pw.get_run_status(run.pk)["waiting_on"]
    return (waiting or {}).get("kind"), (waiting or {}).get("step_key")


def test_list_fields__a_completed_run_has_every_step_done_and_waits_on_nothing(shop):
    run = shop.start(items=["lamp"])

    assert listed(run) == (3, 3, "ship", None, None)


def test_list_fields__a_failed_run_keeps_its_error_code(shop):
    run = shop.failed()

    assert listed(run) == (2, 1, "charge", None, "STEP_FAILED")


def test_list_fields__a_run_parked_on_a_timer_waits_on_it(shop):
    run = shop.start(sleep="1h")

    total, done, step_key, waiting_on, _ = listed(run)
    assert (waiting_on, step_key) == summary_wait(run) == ("timer", step_key)
    assert (total, done) == (3, 2)


def test_list_fields__a_retry_backoff_is_a_retry(shop):
    run = shop.failed(retries=3, retry_delay="1h")

    assert listed(run)[2:] == ("charge", "retry", "ConnectionError")  # the attempt's error
    assert summary_wait(run) == ("retry", "charge")


@pytest.mark.django_db(transaction=True)  # the resume's message is sent on commit
def test_list_fields__suspend_and_resume_move_them_in_the_same_write(shop):
    run = shop.start(review=True)
    assert listed(run)[3] == "suspend"

    pw.resume_run(run.pk)
    drain_queue()

    assert listed(run) == (3, 3, "ship", None, None)  # the suspend is the engine's own step


def test_list_fields__a_cancelled_run_waits_on_nothing(shop):
    run = shop.start(sleep="1h")

    pw.cancel_run(run.pk)

    assert listed(run)[3] == None  # noqa: E711


@pytest.mark.django_db(transaction=True)
def test_list_fields__a_queued_run_waits_for_its_pass_until_a_worker_takes_it(shop):
    run_id = pw.start_workflow(shop.workflow, {"sleep": "1h"})
    run = WorkflowRun.objects.get(pk=run_id)
    assert listed(run) == (0, 0, None, "pass", None)

    drain_queue()

    assert listed(run)[3] == summary_wait(run)[0] == "timer"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(PIKKU_WORKFLOWS={"IN_PLACE": False})  # the step goes through the queue
def test_list_fields__a_pass_parked_by_its_dispatch_waits_on_the_queued_step():
    @pw.step_function("listed.queued", inline=False)
    def queued(data: dict, ctx: pw.StepContext) -> int:
        return 1

    @pw.workflow("listed.flow")
    def flow(wf: pw.Workflow, input: dict) -> int:
        return wf.do("first", lambda: 1) + wf.do("remote", "listed.queued", {})

    run_id = pw.start_workflow("listed.flow", {})
    tasks.orchestrate(run_id)  # the start message: runs `first`, dispatches `remote`, parks

    run = WorkflowRun.objects.get(pk=run_id)
    assert listed(run) == (2, 1, "remote", "step", None)
    assert summary_wait(run) == ("step", "remote")
