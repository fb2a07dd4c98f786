"""Step functions' limits and rates: an attempt over a rate waits, its step pending, until the
exact time the GCRA gave it (the timer loop dispatches it then); `pw.RateLimited` records the
attempt failed without spending a retry and closes the step's keys for everyone."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers, shift_timers
from pikku_workflows.models import WorkflowRate
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue
from tests.rows import attempt_statuses, load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _workflow_calling(name: str, function: str) -> None:
    @pw.workflow(name)
    def body(wf, input):
        return wf.do("call", function, input, retries=0)


def _queued_step(name: str, **options) -> list[dict]:
    calls: list[dict] = []

    @pw.step_function(name, inline=False, **options)
    def step(data, ctx):
        calls.append(data)
        return data

    return calls


def test_step_rate__an_attempt_past_its_key_s_rate_waits_pending_until_its_exact_gcra_time():
    _queued_step("rates.fetch", rate=pw.Rate(key=lambda data: f"shop:{data['shop']}", rate="60/h"))
    _workflow_calling("rates.sync", "rates.fetch")
    runs = [pw.start_workflow("rates.sync", {"shop": shop}) for shop in ("a", "a", "a", "b")]

    drain_queue()

    steps = [load_step(run_id, "call") for run_id in runs]
    assert [load_run(run_id).status for run_id in runs] == [
        RunStatus.COMPLETED,
        RunStatus.RUNNING,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,  # another key: not held by shop a
    ]
    assert [step.status for step in steps[1:3]] == [StepStatus.PENDING] * 2
    # Each held attempt got the time the GCRA gave it, one emission (a minute) apart, and
    # its timer at that time: nothing polls.
    assert steps[2].not_before - steps[1].not_before == timedelta(minutes=1)
    assert steps[1].wake_at == steps[1].not_before
    assert attempt_statuses(runs[1], "call") == [(1, StepStatus.PENDING)]
    tat = WorkflowRate.objects.get(limit_name="step:rates.fetch", key="shop:a").tat
    assert tat - steps[2].not_before == timedelta(minutes=1)


def test_step_rate__a_held_run_s_waiting_on_names_the_limit_key_and_until():
    _queued_step("rates.fetch", rate=pw.Rate(key=lambda data: data["shop"], rate="60/h"))
    _workflow_calling("rates.sync", "rates.fetch")
    pw.start_workflow("rates.sync", {"shop": "a"})
    held = pw.start_workflow("rates.sync", {"shop": "a"})

    drain_queue()

    step = load_step(held, "call")
    assert pw.get_run_status(held)["waiting_on"] == {
        "step_key": "call",
        "kind": "admission",
        "reason": "rate",
        "limit": "step:rates.fetch",
        "key": "a",
        "until": step.not_before.isoformat(),
    }


def test_step_rate__the_timer_loop_dispatches_a_held_attempt_once_its_time_came():
    calls = _queued_step("rates.fetch", rate=pw.Rate(rate="60/h"))
    _workflow_calling("rates.sync", "rates.fetch")
    first = pw.start_workflow("rates.sync", {"n": 1})
    second = pw.start_workflow("rates.sync", {"n": 2})
    drain_queue()
    assert load_step(second, "call").status == StepStatus.PENDING
    assert fire_due_timers() == 0

    shift_timers([second], timedelta(minutes=1))
    assert fire_due_timers() == 1
    drain_queue()

    assert [load_run(first).status, load_run(second).status] == [RunStatus.COMPLETED] * 2
    assert calls == [{"n": 1}, {"n": 2}]
    step = load_step(second, "call")
    assert (step.attempt, step.not_before, step.admission_hold) == (1, None, None)


def test_step_rate__a_named_limit_spaces_the_steps_of_every_function_that_names_it():
    pw.define_limit("rates.vendor", rate="60/h")
    _queued_step("rates.one", limits=["rates.vendor"])
    _queued_step("rates.two", limits=["rates.vendor"])
    _workflow_calling("rates.first", "rates.one")
    _workflow_calling("rates.second", "rates.two")
    done = pw.start_workflow("rates.first", {})
    held = pw.start_workflow("rates.second", {})

    drain_queue()

    assert load_run(done).status == RunStatus.COMPLETED
    assert pw.get_run_status(held)["waiting_on"]["limit"] == "rates.vendor"


def test_step_rate__an_in_process_step_over_its_rate_parks_its_run_until_the_time():
    @pw.step_function("rates.local", rate=pw.Rate(rate="60/h"))
    def local(data, ctx):
        return data

    _workflow_calling("rates.sync", "rates.local")
    pw.start_workflow("rates.sync", {"n": 1})
    held = pw.start_workflow("rates.sync", {"n": 2})

    drain_queue()

    step = load_step(held, "call")
    assert (load_run(held).status, step.status) == (RunStatus.RUNNING, StepStatus.PENDING)
    assert step.wake_at == step.not_before
    assert pw.get_run_status(held)["waiting_on"]["kind"] == "admission"


def test_step_rate__an_inline_caller_waits_out_a_short_hold_and_finishes_the_run():
    calls = []

    @pw.step_function("rates.local", rate=pw.Rate(rate="1/s"))
    def local(data, ctx):
        calls.append(data)
        return data

    @pw.workflow("rates.twice")
    def twice(wf, input):
        return [wf.do("one", "rates.local", 1), wf.do("two", "rates.local", 2)]

    run_id = pw.start_workflow("rates.twice", {}, inline=True)

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert calls == [1, 2]
    # The second attempt began one emission (a second) after the first, as the GCRA said.
    one, two = (load_step(run_id, key).history.get().running_at for key in ("one", "two"))
    assert two - one >= timedelta(milliseconds=950)


@pytest.mark.parametrize("atomic", [False, True])
def test_rate_limited__the_attempt_fails_rate_limited_without_spending_a_retry(atomic):
    refusals = []

    @pw.step_function("rates.vendor_call", inline=False, limits=["rates.vendor"], atomic=atomic)
    def vendor_call(data, ctx):
        if not refusals:
            refusals.append(ctx.attempt)
            raise pw.RateLimited(retry_after="1h")
        return "ok"

    pw.define_limit("rates.vendor", rate="1000/s")
    _workflow_calling("rates.sync", "rates.vendor_call")
    run_id = pw.start_workflow("rates.sync", {})

    drain_queue()

    step = load_step(run_id, "call")
    assert step.status == StepStatus.FAILED
    assert step.error["code"] == "RATE_LIMITED"
    # retries=0, yet a next attempt is owed: the refusal did not spend it.
    assert (step.attempt, step.attempt_limit) == (1, 2)
    assert step.wake_at - step.updated_at > timedelta(minutes=59)
    assert load_run(run_id).status == RunStatus.RUNNING


def test_rate_limited__closes_the_step_s_limit_keys_for_every_step_and_run_behind_them():
    @pw.step_function("rates.vendor_call", inline=False, limits=["rates.vendor"])
    def vendor_call(data, ctx):
        raise pw.RateLimited(retry_after="1h")

    _queued_step("rates.other_call", limits=["rates.vendor"])
    pw.define_limit("rates.vendor", rate="1000/s", burst=10)
    _workflow_calling("rates.refused", "rates.vendor_call")
    _workflow_calling("rates.other", "rates.other_call")

    @pw.workflow("rates.started", limits=["rates.vendor"])
    def started(wf, input):
        return input

    refused = pw.start_workflow("rates.refused", {})
    drain_queue()
    other = pw.start_workflow("rates.other", {})
    run = pw.start_workflow("rates.started", {})
    drain_queue()

    until = load_step(refused, "call").wake_at
    other_step = load_step(other, "call")
    assert other_step.status == StepStatus.PENDING
    # The next attempt behind the closed key begins when the refusal said (to the ms of the
    # two statements between them), and a run start naming the limit waits as long.
    assert abs(other_step.not_before - until) < timedelta(seconds=1)
    assert load_run(run).status == RunStatus.QUEUED
    assert abs(load_run(run).not_before - until) < timedelta(seconds=1)


def test_rate_limited__without_retry_after_the_attempt_waits_its_backoff_unspent():
    @pw.step_function("rates.vendor_call", inline=False)
    def vendor_call(data, ctx):
        raise pw.RateLimited()

    @pw.workflow("rates.sync")
    def body(wf, input):
        return wf.do("call", "rates.vendor_call", input, retries=1, retry_delay="1h")

    run_id = pw.start_workflow("rates.sync", {})
    drain_queue()

    step = load_step(run_id, "call")
    assert (step.attempt, step.attempt_limit, step.error["code"]) == (1, 3, "RATE_LIMITED")
    assert step.wake_at - step.updated_at > timedelta(minutes=59)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"rate": "10/x"}, "rate"),
        ({"rate": "10/s", "burst": -1}, "burst"),
        ({"rate": "10/s", "key": 5}, "key"),
        ({"rate": "10/s", "key": ""}, "key"),
    ],
)
def test_step_rate__a_bad_rate_is_invalid_input_at_definition(options, problem):
    with pytest.raises(pw.InvalidInput, match=problem):
        pw.Rate(**options)


def test_step_rate__bad_step_function_options_are_invalid_input_at_registration():
    with pytest.raises(pw.InvalidInput, match="limits"):
        pw.step_function("rates.bad", limits="openai")
    with pytest.raises(pw.InvalidInput, match=r"pw\.Rate"):
        pw.step_function("rates.bad", rate="10/s")
    with pytest.raises(pw.InvalidInput, match="colon"):
        pw.define_limit("step:x", rate="1/s")


def test_step_rate__an_unknown_limit_or_a_failing_key_is_raised_in_the_body_writing_no_step():
    _queued_step("rates.nowhere", limits=["rates.undefined"])
    _queued_step("rates.keyed", rate=pw.Rate(rate="1/s", key=lambda data: data["missing"]))
    seen = []

    @pw.workflow("rates.sync")
    def body(wf, input):
        for function in ("rates.nowhere", "rates.keyed"):
            try:
                wf.do(function.replace(".", "_"), function, {})
            except pw.WorkflowError as exc:
                seen.append(exc.code)
        return seen

    run_id = pw.start_workflow("rates.sync", {})
    drain_queue()

    assert load_run(run_id).output == ["LIMIT_NOT_FOUND", "INVALID_INPUT"]
    assert not load_run(run_id).steps.exists()


def test_step_rate__a_map_s_members_past_the_rate_wait_each_for_its_time_then_finish():
    _queued_step("rates.fetch", rate=pw.Rate(rate="60/h", burst=1))

    @pw.workflow("rates.mapped")
    def mapped(wf, input):
        return wf.map("item", "rates.fetch", [1, 2, 3])

    run_id = pw.start_workflow("rates.mapped", {})
    drain_queue()

    statuses = [load_step(run_id, f"item[{i}]").status for i in range(3)]
    assert statuses == [StepStatus.SUCCEEDED, StepStatus.SUCCEEDED, StepStatus.PENDING]
    shift_timers([run_id], timedelta(minutes=2))
    fire_due_timers()
    drain_queue()
    assert load_run(run_id).output == [1, 2, 3]
