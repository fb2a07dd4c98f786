"""Named limits' rates: GCRA on the database clock gives each start the exact time it may
begin; a run held by a rate waits queued until then and the timer loop admits it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.models import WorkflowLimit, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _limited(name: str, limit: str) -> None:
    @pw.workflow(name, limits=[limit])
    def body(wf, input):
        return input


def test_rate__starts_past_the_burst_wait_queued_until_their_exact_gcra_time():
    pw.define_limit("rates.llm", rate="60/h", burst=1)
    _limited("rates.call", "rates.llm")

    runs = [pw.start_workflow("rates.call", {"n": n}) for n in range(4)]

    rows = [load_run(run_id) for run_id in runs]
    assert [row.status for row in rows] == [
        RunStatus.RUNNING,
        RunStatus.RUNNING,
        RunStatus.QUEUED,
        RunStatus.QUEUED,
    ]
    # The third start may begin one emission interval (a minute) after the first, the fourth
    # one more after it: the times the GCRA gave them, not a poll's.
    assert rows[3].not_before - rows[2].not_before == timedelta(minutes=1)
    assert rows[2].not_before - rows[0].not_before > timedelta(seconds=59)
    summary = pw.get_run_status(runs[2])
    assert summary["waiting_on"] == {
        "kind": "admission",
        "reason": "rate",
        "limit": "rates.llm",
        "until": rows[2].not_before.isoformat(),
    }


def test_rate__the_timer_loop_admits_a_run_once_its_time_came():
    pw.define_limit("rates.fast", rate="4/s")
    _limited("rates.call", "rates.fast")
    first = pw.start_workflow("rates.call", {"n": 1})
    second = pw.start_workflow("rates.call", {"n": 2})
    assert load_run(second).status == RunStatus.QUEUED

    wait_until(lambda: fire_due_timers() and load_run(second).status == RunStatus.RUNNING)
    assert load_run(second).waiting_on == "pass"  # the list's column: its first pass next

    drain_queue()
    assert [load_run(first).status, load_run(second).status] == [RunStatus.COMPLETED] * 2


def test_rate__an_operator_s_limit_row_wins_over_the_code_s_rate():
    pw.define_limit("rates.edited", rate="1000/s")
    WorkflowLimit.objects.create(name="rates.edited", rate="1/d", burst=0)
    _limited("rates.call", "rates.edited")

    pw.start_workflow("rates.call", {"n": 1})
    second = load_run(pw.start_workflow("rates.call", {"n": 2}))

    assert second.status == RunStatus.QUEUED
    assert second.not_before - second.created_at > timedelta(hours=23)


def test_rate__a_start_naming_an_undefined_limit_is_limit_not_found_and_writes_nothing():
    _limited("rates.call", "rates.nowhere")

    with pytest.raises(pw.LimitNotFound, match=r"rates\.nowhere"):
        pw.start_workflow("rates.call", {})

    assert not WorkflowRun.objects.exists()


def test_rate__a_start_under_one_limit_costs_one_statement_more_than_without():
    @pw.workflow("rates.free")
    def free(wf, input):
        return input

    pw.define_limit("rates.cheap", rate="1000/s", burst=10)
    _limited("rates.call", "rates.cheap")

    with CaptureQueriesContext(connection) as plain:
        pw.start_workflow("rates.free", {})
    with CaptureQueriesContext(connection) as limited:
        pw.start_workflow("rates.call", {})

    assert len(limited) <= len(plain) + 1, [query["sql"][:60] for query in limited]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"rate": "10/x"}, 'must look like "10/s"'),
        ({"rate": "10/s", "burst": -1}, "burst"),
    ],
)
def test_define_limit__a_bad_rate_or_burst_is_invalid_input(options, problem):
    with pytest.raises(pw.InvalidInput, match=problem):
        pw.define_limit("rates.bad", **options)


def test_rate__a_held_run_suspended_and_resumed_waits_out_the_rest_of_its_time():
    pw.define_limit("rates.slow", rate="60/h", burst=0)
    _limited("rates.call", "rates.slow")
    pw.start_workflow("rates.call", {"n": 1})
    held = pw.start_workflow("rates.call", {"n": 2})
    not_before = load_run(held).not_before

    pw.suspend_run(held, reason="look first")
    resumed = pw.resume_run(held)

    # Back in the queue until the rate's time, not running ahead of it.
    assert resumed["status"] == RunStatus.QUEUED
    assert load_run(held).not_before == not_before
    assert resumed["waiting_on"]["reason"] == "rate"
    fire_due_timers()
    assert load_run(held).status == RunStatus.QUEUED


def test_rate__a_run_suspended_after_its_time_came_resumes_running():
    pw.define_limit("rates.quick", rate="1000/s", burst=0)
    _limited("rates.call", "rates.quick")
    run_id = pw.start_workflow("rates.call", {"n": 1})
    pw.suspend_run(run_id, reason="look first")

    assert pw.resume_run(run_id)["status"] == RunStatus.RUNNING
