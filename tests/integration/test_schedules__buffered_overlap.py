"""Buffered overlaps: a tick while the schedule's run is going waits as a queued run
(`buffer_one` keeps one, later ticks skip; `buffer_all` keeps each, in tick order, up to a
cap), admitted in the transaction that ends the run before it, however it ends."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from html import unescape
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations import schedule_firing
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from pikku_workflows.waiting import WaitingKind
from tests.admin_support import change_url
from tests.queue import drain_queue
from tests.schedules import MINUTE, make_due, register_report, runs_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def fire_at(name: str, nominal: datetime) -> None:
    """Fire the schedule's tick at `nominal` alone (its end moved just past it: the ticks
    between it and now are not due), as a timer loop would once it is due."""
    WorkflowSchedule.objects.filter(name=name).update(
        next_nominal_at=nominal, next_fire_at=nominal, end_at=nominal + timedelta(seconds=1)
    )
    assert fire_due_schedules() == 1


def buffering(overlap: str, *, body: Any = None, **options: Any) -> tuple[str, list[datetime]]:
    """A schedule every minute whose first tick started a run (still going, no worker took it),
    and its next four nominal times."""
    register_report(body=body)
    pw.create_schedule("minutely", "report", every="1m", overlap=overlap, **options)
    first = make_due("minutely", minutes_ago=4)
    fire_at("minutely", first)
    return "minutely", [first + count * MINUTE for count in range(1, 5)]


def tick_rows(name: str) -> list[tuple[str, Any, str]]:
    rows = WorkflowScheduleTick.objects.filter(schedule__name=name).order_by("nominal_at")
    return list(rows.values_list("outcome", "run_id", "reason"))


def status_of(run_id: Any) -> str:
    return WorkflowRun.objects.get(pk=run_id).status


def test_buffer_one__a_tick_while_the_run_goes_waits_queued_and_later_ones_skip():
    name, (second, third, *_) = buffering("buffer_one")
    first_run = runs_of(name)[0].pk
    fire_at(name, second)
    fire_at(name, third)
    (started, buffered, skipped) = tick_rows(name)
    assert started[0] == "started" and started[1] == first_run
    assert buffered[0] == "buffered" and str(first_run) in buffered[2]
    assert skipped[0] == "skipped" and skipped[1] is None and str(buffered[1]) in skipped[2]
    waiting = WorkflowRun.objects.get(pk=buffered[1])
    assert (waiting.status, waiting.waiting_on, waiting.scheduled_for) == (
        RunStatus.QUEUED,
        WaitingKind.ADMISSION,
        second,
    )
    summary = pw.get_run_status(waiting.pk)
    assert summary["waiting_on"] == {
        "kind": "admission",
        "reason": "overlap",
        "held_by": [str(first_run)],
    }
    assert WorkflowSchedule.objects.get().last_outcome == "skipped"


def test_buffered__the_run_page_says_which_run_holds_it(admin_client):
    name, (second, *_) = buffering("buffer_one")
    first_run = runs_of(name)[0].pk
    fire_at(name, second)
    page = admin_client.get(change_url(runs_of(name)[1])).content.decode()
    waiting = re.search(r'<div class="form-row field-waiting">(.*?)</div>\s*</div>', page, re.S)
    assert waiting is not None
    text = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", waiting.group(1)))).strip()
    assert "its schedule's run before is going, held by run" in text and "key" not in text
    assert str(first_run)[:8] in waiting.group(1)


def test_buffer_one__the_run_before_cancelled_admits_the_buffered_run_which_then_runs():
    name, (second, *_) = buffering("buffer_one")
    first_run = runs_of(name)[0].pk
    fire_at(name, second)
    buffered = runs_of(name)[1].pk
    pw.cancel_run(first_run, reason="stop")
    assert status_of(buffered) == RunStatus.RUNNING
    drain_queue()
    assert WorkflowRun.objects.get(pk=buffered).output == {"scheduled_for": second.isoformat()}


def test_buffer_all__each_tick_waits_and_they_are_admitted_one_at_a_time_in_tick_order():
    name, (second, third, fourth, _) = buffering("buffer_all")
    first_run = runs_of(name)[0].pk
    for nominal in (fourth, second, third):  # fired out of order: admitted in tick order
        fire_at(name, nominal)
    assert [outcome for outcome, _, _ in tick_rows(name)] == ["started"] + ["buffered"] * 3
    waiting = [run.pk for run in runs_of(name)[1:]]
    pw.cancel_run(first_run, reason="stop")
    assert [status_of(run_id) for run_id in waiting] == [RunStatus.RUNNING] + [RunStatus.QUEUED] * 2
    pw.cancel_run(waiting[0], reason="stop")
    assert [status_of(run_id) for run_id in waiting[1:]] == [RunStatus.RUNNING, RunStatus.QUEUED]
    drain_queue()
    assert [status_of(run_id) for run_id in waiting[1:]] == [RunStatus.COMPLETED] * 2


def test_buffer_all__a_tick_beyond_the_most_it_keeps_is_dropped(monkeypatch):
    monkeypatch.setattr(schedule_firing, "MAX_BUFFERED_RUNS", 2)
    name, nominals = buffering("buffer_all")
    for nominal in nominals[:3]:
        fire_at(name, nominal)
    outcomes = [(outcome, run_id is None) for outcome, run_id, _ in tick_rows(name)]
    assert outcomes == [
        ("started", False),
        ("buffered", False),
        ("buffered", False),
        ("dropped", True),
    ]
    assert WorkflowRun.objects.filter(status=RunStatus.QUEUED).count() == 2


def test_buffered__the_run_before_failing_still_admits_it():
    failing: list[datetime] = []

    def fails_first(wf, input):
        if wf.scheduled_for in failing:
            raise RuntimeError("the report broke")
        return "done"

    name, (second, *_) = buffering("buffer_all", body=fails_first)
    failing.append(runs_of(name)[0].scheduled_for)
    fire_at(name, second)
    drain_queue()
    first, buffered = runs_of(name)
    assert (first.status, buffered.status, buffered.output) == (
        RunStatus.FAILED,
        RunStatus.COMPLETED,
        "done",
    )


def test_buffered__pause_on_failure_holds_it_until_the_schedule_is_resumed():
    def fails(wf, input):
        raise RuntimeError("the report broke")

    name, (second, *_) = buffering("buffer_one", body=fails, pause_on_failure=True)
    fire_at(name, second)
    drain_queue()
    first, buffered = runs_of(name)
    assert first.status == RunStatus.FAILED and buffered.status == RunStatus.QUEUED
    schedule = pw.get_schedule(name)
    assert schedule["paused"] and str(first.pk) in schedule["pause_note"]
    pw.resume_schedule(name)
    assert status_of(buffered.pk) == RunStatus.RUNNING


def test_buffered__cancelling_the_buffered_run_leaves_the_running_one_and_frees_the_buffer():
    name, (second, third, *_) = buffering("buffer_one")
    first_run = runs_of(name)[0].pk
    fire_at(name, second)
    buffered = runs_of(name)[1].pk
    pw.cancel_run(buffered, reason="not this one")
    assert (status_of(buffered), status_of(first_run)) == (RunStatus.CANCELLED, RunStatus.RUNNING)
    fire_at(name, third)
    assert [outcome for outcome, _, _ in tick_rows(name)] == ["started", "buffered", "buffered"]
    pw.cancel_run(first_run, reason="stop")
    assert status_of(runs_of(name)[2].pk) == RunStatus.RUNNING


def test_buffered__a_paused_schedule_admits_none_and_deleting_it_cancels_them():
    name, (second, *_) = buffering("buffer_all")
    first_run = runs_of(name)[0].pk
    fire_at(name, second)
    buffered = runs_of(name)[1].pk
    pw.pause_schedule(name, note="hold")
    pw.cancel_run(first_run, reason="stop")
    assert status_of(buffered) == RunStatus.QUEUED
    pw.delete_schedule(name)
    assert status_of(buffered) == RunStatus.CANCELLED


def test_buffered__a_tick_with_no_run_going_starts_at_once():
    name, (second, *_) = buffering("buffer_one")
    pw.cancel_run(runs_of(name)[0].pk, reason="stop")
    fire_at(name, second)
    assert [outcome for outcome, _, _ in tick_rows(name)] == ["started", "started"]
    assert status_of(runs_of(name)[1].pk) == RunStatus.RUNNING


def test_buffered__a_run_of_a_workflow_with_a_concurrency_rule_joins_its_key_queue():
    @pw.workflow("limited", concurrency=pw.Concurrency(key=lambda input: "shared", max_active=1))
    def limited(wf, input):
        return "done"

    holder = pw.start_workflow("limited", {})  # holds the key's only slot
    pw.create_schedule("minutely", "limited", every="1m", overlap="buffer_one", input={})
    first, second = (make_due("minutely", minutes_ago=back) for back in (2, 1))
    fire_at("minutely", first)  # queued by the rule: still the schedule's going run
    fire_at("minutely", second)
    going, buffered = (run.pk for run in runs_of("minutely"))
    assert [outcome for outcome, _, _ in tick_rows("minutely")] == ["started", "buffered"]
    pw.cancel_run(going, reason="stop")
    # Admitted by the schedule, it waits on the rule: the holder still has the slot.
    waiting = WorkflowRun.objects.get(pk=buffered)
    assert (waiting.status, waiting.concurrency_key) == (RunStatus.QUEUED, "shared")
    pw.cancel_run(holder, reason="stop")
    assert status_of(buffered) == RunStatus.RUNNING
