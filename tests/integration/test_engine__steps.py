"""`wf.do`: step keys and ordinals, lineage, invocation ids, the step context, JSON results,
unstorable results, reserved key characters and non-deterministic replays."""

from __future__ import annotations

import uuid

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001")


def _history(run_id: str, key: str) -> list[tuple]:
    return list(
        WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=key)
        .order_by("attempt")
        .values_list("attempt", "status", "result")
    )


def test_step_keys__repeated_key_gets_ordinals():
    seen = []

    @pw.step_function("steps.record_key")
    def record_key(data, ctx):
        seen.append(ctx.step_key)
        return data

    @pw.workflow("steps.repeats")
    def repeats(wf, input):
        return [wf.do("x", "steps.record_key", i) for i in range(3)]

    run_id = pw.start_workflow("steps.repeats", {}, inline=True)

    assert load_run(run_id).output == [0, 1, 2]
    assert seen == ["x", "x#1", "x#2"]
    keys = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    assert [(s.step_key, s.result) for s in keys] == [("x", 0), ("x#1", 1), ("x#2", 2)]


def test_step_keys__ordinals_count_per_logical_name():
    @pw.workflow("steps.interleaved")
    def interleaved(wf, input):
        wf.do("a", lambda: 1)
        wf.do("b", lambda: 2)
        wf.do("a", lambda: 3)
        wf.do("b", lambda: 4)
        wf.do("a", lambda: 5)

    run_id = pw.start_workflow("steps.interleaved", {}, inline=True)

    keys = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    assert [(s.step_key, s.result) for s in keys] == [
        ("a", 1),
        ("b", 2),
        ("a#1", 3),
        ("b#1", 4),
        ("a#2", 5),
    ]


def test_step_keys__from_step_key_is_the_key_reached_before():
    @pw.workflow("steps.lineage")
    def lineage(wf, input):
        wf.do("first", lambda: 1)
        wf.do("x", lambda: 2)
        wf.sleep("pause", 1)
        wf.do("x", lambda: 3)
        wf.do("last", lambda: 4)

    run_id = pw.start_workflow("steps.lineage", {}, inline=True)

    rows = WorkflowStep.objects.filter(run_id=run_id).order_by("created_at")
    assert [(s.step_key, s.from_step_key) for s in rows] == [
        ("first", None),
        ("x", "first"),
        ("pause", "x"),
        ("x#1", "pause"),
        ("last", "x#1"),
    ]


def test_step_context__invocation_id_is_uuid5_and_stable_across_retries():
    contexts = []

    @pw.step_function("steps.flaky")
    def flaky(data, ctx):
        contexts.append(ctx)
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt} failed")
        return "ok"

    @pw.workflow("steps.retries_context")
    def retries_context(wf, input):
        wf.do("before", lambda: None)
        return wf.do("charge", "steps.flaky", {"amount": 5}, retries=3, retry_delay=0)

    run_id = pw.start_workflow("steps.retries_context", {}, inline=True)

    assert load_run(run_id).output == "ok"
    step = load_step(run_id, "charge")
    expected = str(uuid.uuid5(NAMESPACE, f"{run_id}:charge"))
    assert [ctx.invocation_id for ctx in contexts] == [expected] * 3
    assert [ctx.attempt for ctx in contexts] == [1, 2, 3]
    assert {ctx.run_id for ctx in contexts} == {run_id}
    assert {ctx.step_id for ctx in contexts} == {str(step.pk)}
    assert {ctx.step_key for ctx in contexts} == {"charge"}
    assert {ctx.from_invocation_id for ctx in contexts} == {
        str(uuid.uuid5(NAMESPACE, f"{run_id}:before"))
    }
    assert {ctx.started_by for ctx in contexts} == {None}


def test_step_context__invocation_id_uses_the_physical_key():
    contexts = []

    @pw.step_function("steps.context")
    def context(data, ctx):
        contexts.append(ctx)
        return None

    @pw.workflow("steps.two_reaches")
    def two_reaches(wf, input):
        wf.do("x", "steps.context")
        wf.do("x", "steps.context")

    run_id = pw.start_workflow("steps.two_reaches", {}, inline=True)

    first, second = contexts
    assert first.invocation_id == str(uuid.uuid5(NAMESPACE, f"{run_id}:x"))
    assert second.invocation_id == str(uuid.uuid5(NAMESPACE, f"{run_id}:x#1"))
    assert first.from_invocation_id is None
    assert second.from_invocation_id == first.invocation_id
    assert [first.attempt, second.attempt] == [1, 1]


def test_step_function__receives_its_data_as_json():
    received = []

    @pw.step_function("steps.takes_data")
    def takes_data(data, ctx):
        received.append(data)
        return None

    @pw.workflow("steps.sends_data")
    def sends_data(wf, input):
        wf.do("send", "steps.takes_data", {"pair": (1, 2), "n": 3})

    run_id = pw.start_workflow("steps.sends_data", {}, inline=True)

    assert received == [{"pair": [1, 2], "n": 3}]
    assert load_step(run_id, "send").data == {"pair": [1, 2], "n": 3}


def test_step_results__are_json_round_tripped_on_first_run_and_on_replay():
    seen = []

    @pw.step_function("steps.tuple")
    def returns_tuple(data, ctx):
        return (1, 2, {"nested": (3,)})

    @pw.workflow("steps.round_trip")
    def round_trip(wf, input):
        by_name = wf.do("named", "steps.tuple")
        by_callable = wf.do("inline", lambda: ("a", "b"))
        seen.append((by_name, by_callable))
        wf.suspend("look again")
        return [by_name, by_callable]

    run_id = pw.start_workflow("steps.round_trip", {}, inline=True)
    pw.resume_run(run_id)
    orchestrate(run_id)

    expected = ([1, 2, {"nested": [3]}], ["a", "b"])
    assert seen == [expected, expected]
    assert load_run(run_id).output == list(expected)
    assert load_step(run_id, "named").result == [1, 2, {"nested": [3]}]


@pytest.mark.parametrize(
    "bad_result",
    [float("nan"), float("inf"), object(), {"text": "nul\x00"}],
    ids=["nan", "infinity", "object", "nul"],
)
def test_step_results__unstorable_result_fails_the_step_without_writing_it(bad_result):
    calls = []

    @pw.step_function("steps.bad_result")
    def bad(data, ctx):
        calls.append(ctx.attempt)
        return bad_result

    @pw.workflow("steps.unstorable")
    def unstorable(wf, input):
        return wf.do("compute", "steps.bad_result", retries=3, retry_delay=0)

    run_id = pw.start_workflow("steps.unstorable", {}, inline=True)

    step = load_step(run_id, "compute")
    assert step.status == StepStatus.FAILED
    assert step.result is None
    assert step.error["code"] == "STEP_RESULT_NOT_SERIALIZABLE"
    assert "'compute'" in step.error["message"]
    assert step.error["step_key"] == "compute"
    # Retrying cannot make the value storable: one attempt, no result in the history either.
    assert calls == [1]
    assert _history(run_id, "compute") == [(1, StepStatus.FAILED, None)]
    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "compute")


def test_step_results__unstorable_result_is_catchable_as_step_failed():
    @pw.workflow("steps.catches_unstorable")
    def catches_unstorable(wf, input):
        try:
            wf.do("compute", lambda: float("nan"))
        except pw.StepFailed as exc:
            return {"caught": exc.step_key, "code": exc.error["code"]}
        return "not reached"

    run_id = pw.start_workflow("steps.catches_unstorable", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"caught": "compute", "code": "STEP_RESULT_NOT_SERIALIZABLE"}


@pytest.mark.parametrize("key", ["a#1", "a:b", "a[0]", "]", ""])
def test_step_keys__reserved_characters_fail_the_run_with_invalid_input(key):
    calls = []

    @pw.workflow("steps.reserved")
    def reserved(wf, input):
        wf.do(input["key"], lambda: calls.append(1))

    run_id = pw.start_workflow("steps.reserved", {"key": key}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert calls == []
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()


def test_step_keys__reserved_characters_in_a_sleep_key_fail_the_run():
    @pw.workflow("steps.reserved_sleep")
    def reserved_sleep(wf, input):
        wf.sleep("nap:1", 1)

    run_id = pw.start_workflow("steps.reserved_sleep", {}, inline=True)

    assert load_run(run_id).error["code"] == "INVALID_INPUT"


def test_replay__different_function_at_a_recorded_key_fails_non_deterministic():
    chosen = {"function": "steps.charge_v1"}
    calls = []

    @pw.step_function("steps.charge_v1")
    def charge_v1(data, ctx):
        calls.append("v1")
        return {"charged": 1}

    @pw.step_function("steps.charge_v2")
    def charge_v2(data, ctx):
        calls.append("v2")
        return {"charged": 2}

    @pw.workflow("steps.changes_its_mind")
    def changes_its_mind(wf, input):
        charged = wf.do("charge", chosen["function"])
        wf.suspend("between passes")
        return charged

    run_id = pw.start_workflow("steps.changes_its_mind", {}, inline=True)
    recorded = WorkflowStep.objects.filter(run_id=run_id, step_key="charge").values().get()
    history_before = _history(run_id, "charge")

    chosen["function"] = "steps.charge_v2"
    pw.resume_run(run_id)
    orchestrate(run_id)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "NON_DETERMINISTIC"
    assert "'charge'" in run.error["message"]
    assert calls == ["v1"]
    assert WorkflowStep.objects.filter(run_id=run_id, step_key="charge").values().get() == recorded
    assert _history(run_id, "charge") == history_before


def test_replay__callable_where_a_function_was_recorded_fails_non_deterministic():
    use_callable = {"now": False}

    @pw.step_function("steps.named")
    def named(data, ctx):
        return 1

    @pw.workflow("steps.kind_changes")
    def kind_changes(wf, input):
        value = wf.do("x", (lambda: 2) if use_callable["now"] else "steps.named")
        wf.suspend("between passes")
        return value

    run_id = pw.start_workflow("steps.kind_changes", {}, inline=True)
    use_callable["now"] = True
    pw.resume_run(run_id)
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "NON_DETERMINISTIC")
    assert load_step(run_id, "x").result == 1


def test_replay__renamed_callable_at_a_recorded_key_is_not_non_deterministic():
    version = {"n": 1}

    def first_version():
        return "recorded"

    def second_version():
        return "new"

    @pw.workflow("steps.renamed_lambda")
    def renamed_lambda(wf, input):
        value = wf.do("x", first_version if version["n"] == 1 else second_version)
        wf.suspend("between passes")
        return value

    run_id = pw.start_workflow("steps.renamed_lambda", {}, inline=True)
    version["n"] = 2
    pw.resume_run(run_id)
    orchestrate(run_id)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "recorded")


def test_step__callable_step_with_data_fails_the_run_with_invalid_input():
    @pw.workflow("steps.callable_with_data")
    def callable_with_data(wf, input):
        wf.do("x", lambda: 1, {"not": "allowed"})

    run_id = pw.start_workflow("steps.callable_with_data", {}, inline=True)

    assert load_run(run_id).error["code"] == "INVALID_INPUT"


def test_step__timeout_on_an_in_process_step_fails_the_run_with_invalid_input():
    @pw.step_function("steps.quick")
    def quick(data, ctx):
        return None

    @pw.workflow("steps.timeout_inline")
    def timeout_inline(wf, input):
        wf.do("x", "steps.quick", timeout="1s")

    run_id = pw.start_workflow("steps.timeout_inline", {}, inline=True)

    assert load_run(run_id).error["code"] == "INVALID_INPUT"
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()


def test_step__unstorable_data_fails_the_run_with_invalid_input():
    @pw.step_function("steps.never_called")
    def never_called(data, ctx):
        raise AssertionError("not called")

    @pw.workflow("steps.bad_data")
    def bad_data(wf, input):
        wf.do("x", "steps.never_called", {"amount": float("nan")})

    run_id = pw.start_workflow("steps.bad_data", {}, inline=True)

    assert load_run(run_id).error["code"] == "INVALID_INPUT"
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()


def test_step__queued_function_runs_in_process_in_an_inline_run():
    from django_q.models import OrmQ

    seen = []

    @pw.step_function("steps.on_a_worker", inline=False)
    def on_a_worker(data, ctx):
        seen.append(ctx.attempt)
        return "ran here"

    @pw.workflow("steps.inline_run_with_queued_step")
    def inline_run_with_queued_step(wf, input):
        return wf.do("x", "steps.on_a_worker")

    run_id = pw.start_workflow("steps.inline_run_with_queued_step", {}, inline=True)

    assert (load_run(run_id).status, load_run(run_id).output) == (RunStatus.COMPLETED, "ran here")
    assert seen == [1]
    assert OrmQ.objects.count() == 0


def test_step__queued_function_is_dispatched_by_a_worker_pass():
    from django_q.models import OrmQ

    seen = []

    @pw.step_function("steps.for_a_worker", inline=False)
    def for_a_worker(data, ctx):
        seen.append(ctx.attempt)
        return "ran on a worker"

    @pw.workflow("steps.queued_run_with_queued_step")
    def queued_run_with_queued_step(wf, input):
        return wf.do("x", "steps.for_a_worker", {"n": 1})

    run_id = pw.start_workflow("steps.queued_run_with_queued_step", {})
    queued = OrmQ.objects.count()

    orchestrate(run_id)

    assert seen == []
    assert load_run(run_id).status == RunStatus.RUNNING
    step = load_step(run_id, "x")
    assert (step.status, step.attempt, step.data) == (StepStatus.SCHEDULED, 1, {"n": 1})
    assert OrmQ.objects.count() == queued + 1
    assert pw.get_run_status(run_id)["waiting_on"] == {"kind": "step", "step_key": "x"}


def test_step_errors__message_with_a_nul_keeps_code_type_and_step_key():
    @pw.step_function("steps.nul_error")
    def nul_error(data, ctx):
        raise ValueError("bad byte \x00 here")

    @pw.workflow("steps.nul_error_run")
    def nul_error_run(wf, input):
        wf.do("x", "steps.nul_error", retries=0)

    run_id = pw.start_workflow("steps.nul_error_run", {}, inline=True)

    error = load_step(run_id, "x").error
    assert (error["code"], error["type"], error["step_key"]) == (
        "ValueError",
        "builtins.ValueError",
        "x",
    )
    assert "bad byte" in error["message"]
    assert "\x00" not in error["message"]
    assert load_run(run_id).error["type"] == "builtins.ValueError"
