"""`wf.sleep`: in-process in an inline run up to INLINE_SLEEP_MAX_SECONDS, otherwise a timer
that parks the run until a pass finds it due."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_sleep__short_sleep_in_an_inline_run_completes_in_process():
    @pw.workflow("sleep.short")
    def short(wf, input):
        wf.sleep("nap", "50ms")
        return "rested"

    run_id = pw.start_workflow("sleep.short", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "rested")
    nap = load_step(run_id, "nap")
    assert (nap.status, nap.kind, nap.data, nap.wake_at) == (
        StepStatus.SUCCEEDED,
        "sleep",
        {"duration_ms": 50},
        None,
    )


def test_sleep__long_sleep_parks_the_run_on_a_timer():
    @pw.workflow("sleep.long")
    def long(wf, input):
        wf.sleep("cool-off", "2h")
        return "rested"

    before = timezone.now()
    run_id = pw.start_workflow("sleep.long", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output, run.lease_holder) == (RunStatus.RUNNING, None, None)
    step = load_step(run_id, "cool-off")
    assert step.status == StepStatus.SCHEDULED
    assert before + timedelta(hours=2) <= step.wake_at <= timezone.now() + timedelta(hours=2)
    waiting_on = pw.get_run_status(run_id)["waiting_on"]
    assert waiting_on == {
        "kind": "timer",
        "step_key": "cool-off",
        "until": step.wake_at.isoformat(),
    }


@override_settings(PIKKU_WORKFLOWS={"INLINE_SLEEP_MAX_SECONDS": 0})
def test_sleep__limit_comes_from_inline_sleep_max_seconds():
    @pw.workflow("sleep.over_the_limit")
    def over_the_limit(wf, input):
        wf.sleep("nap", "1s")  # over a limit of 0, and never due before the pass checks
        return "rested"

    run_id = pw.start_workflow("sleep.over_the_limit", {}, inline=True)

    assert load_run(run_id).status == RunStatus.RUNNING
    assert load_step(run_id, "nap").status == StepStatus.SCHEDULED


def test_sleep__pass_before_the_timer_is_due_parks_again():
    calls = []

    @pw.workflow("sleep.not_yet")
    def not_yet(wf, input):
        wf.sleep("nap", "1h")
        calls.append("after")
        return "rested"

    run_id = pw.start_workflow("sleep.not_yet", {}, inline=True)
    orchestrate(run_id)

    assert calls == []
    assert load_step(run_id, "nap").status == StepStatus.SCHEDULED
    assert load_run(run_id).status == RunStatus.RUNNING


def test_sleep__due_timer_lets_the_next_pass_continue():
    @pw.workflow("sleep.due")
    def due(wf, input):
        before = wf.do("before", lambda: 1)
        wf.sleep("nap", "1h")
        return before + wf.do("after", lambda: 2)

    run_id = pw.start_workflow("sleep.due", {}, inline=True)
    # What the timer loop does when the sleep is over: the row is due, a pass replays.
    WorkflowStep.objects.filter(run_id=run_id, step_key="nap").update(
        wake_at=timezone.now() - timedelta(seconds=1)
    )
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, 3)
    nap = load_step(run_id, "nap")
    assert (nap.status, nap.wake_at) == (StepStatus.SUCCEEDED, None)
