"""Starting runs: `start_workflow`, `run_to_completion`, idempotency keys, who and what a run is about."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from project.demo.models import Order
from tests.rows import load_run

pytestmark = pytest.mark.postgres

transactional = pytest.mark.django_db(transaction=True)


@transactional
def test_start_workflow__inline_returns_the_id_of_a_completed_run():
    @pw.workflow("start.doubles")
    def doubles(wf, input):
        return {"twice": wf.do("double", lambda: input["n"] * 2)}

    run_id = pw.start_workflow("start.doubles", {"n": 21}, inline=True)

    run = load_run(run_id)
    assert isinstance(run_id, str)
    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, {"twice": 42}, None)
    assert run.inline is True
    assert run.finished_at is not None
    assert (run.lease_holder, run.lease_expires_at) == (None, None)


@transactional
def test_start_workflow__failing_body_does_not_raise_and_records_the_error():
    @pw.workflow("start.explodes")
    def explodes(wf, input):
        raise ValueError("boom")

    run_id = pw.start_workflow("start.explodes", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert set(run.error) == {"code", "message", "type", "traceback"}
    assert run.error["message"] == "boom"
    assert run.error["code"] == "ValueError"
    assert run.error["type"] == "builtins.ValueError"
    assert "boom" in run.error["traceback"]
    assert run.output is None
    assert run.finished_at is not None


@transactional
def test_start_workflow__queued_start_creates_a_running_run_without_running_the_body():
    calls = []

    @pw.workflow("start.queued")
    def queued(wf, input):
        calls.append(input)
        return None

    run_id = pw.start_workflow("start.queued", {"a": 1})

    run = load_run(run_id)
    assert (run.status, run.inline, run.input) == (RunStatus.RUNNING, False, {"a": 1})
    assert calls == []


@transactional
def test_run_to_completion__returns_the_output():
    @pw.workflow("start.echo")
    def echo(wf, input):
        return {"echo": wf.do("copy", lambda: input)}

    assert pw.run_to_completion("start.echo", {"x": [1, 2]}) == {"echo": {"x": [1, 2]}}


@transactional
def test_run_to_completion__failing_body_raises_run_failed_with_the_error():
    @pw.workflow("start.fails")
    def fails(wf, input):
        raise RuntimeError("no stock")

    with pytest.raises(pw.RunFailed) as caught:
        pw.run_to_completion("start.fails", {})

    assert caught.value.code == "RUN_FAILED"
    assert caught.value.error["message"] == "no stock"
    assert load_run(caught.value.run_id).status == RunStatus.FAILED


@transactional
def test_run_to_completion__suspending_body_raises_run_suspended():
    @pw.workflow("start.suspends")
    def suspends(wf, input):
        wf.suspend("waiting for stock")
        return "never"

    with pytest.raises(pw.RunSuspended) as caught:
        pw.run_to_completion("start.suspends", {})

    assert caught.value.code == "RUN_SUSPENDED"
    assert caught.value.error["code"] == "WORKFLOW_SUSPENDED"
    assert caught.value.error["message"] == "waiting for stock"
    assert load_run(caught.value.run_id).status == RunStatus.SUSPENDED


@transactional
def test_run_to_completion__run_parked_on_a_long_sleep_raises_run_timeout():
    @pw.workflow("start.sleeps_long")
    def sleeps_long(wf, input):
        wf.sleep("nap", "1h")
        return "woke"

    with pytest.raises(pw.RunTimeout) as caught:
        pw.run_to_completion("start.sleeps_long", {}, timeout="200ms")

    assert caught.value.code == "RUN_TIMEOUT"
    assert load_run(caught.value.run_id).status == RunStatus.RUNNING
    # It says what the run waits on, that it goes on, and how to wait for it or not at all.
    until = caught.value.waiting_on["until"]
    assert caught.value.message == (
        f"Workflow run {caught.value.run_id} did not finish within 0.2 s (it waits on timer nap "
        f"until {until}): it goes on on a worker; pass timeout=None to wait for it, or in tests "
        "drain(run_id, advance=...)."
    )


def test_run_to_completion__waits_a_minute_unless_told():
    """A shell is not blocked for the length of a long sleep (nor for ever with no worker)."""
    timeout = inspect.signature(pw.run_to_completion).parameters["timeout"]
    assert timeout.default == "1m"


@transactional
@pytest.mark.parametrize("timeout", ["2m", "30s", timedelta(seconds=30)])
def test_run_to_completion__timeout_is_a_duration(timeout):
    @pw.workflow("start.quick")
    def quick(wf, input):
        return "done"

    assert pw.run_to_completion("start.quick", {}, timeout=timeout) == "done"


@transactional
def test_run_to_completion__a_bare_number_is_seconds_and_deprecated():
    @pw.workflow("start.quick_number")
    def quick(wf, input):
        return "done"

    with pytest.warns(DeprecationWarning, match='"30s"'):
        assert pw.run_to_completion("start.quick_number", {}, timeout=30) == "done"


@transactional
def test_run_to_completion__a_number_of_seconds_still_times_out():
    @pw.workflow("start.sleeps_long_number")
    def sleeps_long(wf, input):
        wf.sleep("nap", "1h")

    with pytest.warns(DeprecationWarning), pytest.raises(pw.RunTimeout):
        pw.run_to_completion("start.sleeps_long_number", {}, timeout=0.2)


@transactional
def test_start_workflow__same_idempotency_key_and_input_returns_the_same_run():
    calls = []

    @pw.workflow("start.once")
    def once(wf, input):
        calls.append(input)
        return input

    first = pw.start_workflow("start.once", {"order": 7}, inline=True, idempotency_key="order-7")
    second = pw.start_workflow("start.once", {"order": 7}, inline=True, idempotency_key="order-7")

    assert first == second
    assert WorkflowRun.objects.filter(workflow="start.once").count() == 1
    assert calls == [{"order": 7}]


@transactional
def test_start_workflow__same_idempotency_key_with_another_input_raises_conflict():
    @pw.workflow("start.keyed")
    def keyed(wf, input):
        return input

    pw.start_workflow("start.keyed", {"order": 7}, inline=True, idempotency_key="order-7")

    with pytest.raises(pw.IdempotencyConflict) as caught:
        pw.start_workflow("start.keyed", {"order": 8}, inline=True, idempotency_key="order-7")

    assert caught.value.code == "IDEMPOTENCY_CONFLICT"
    assert WorkflowRun.objects.filter(workflow="start.keyed").count() == 1


@transactional
def test_start_workflow__idempotency_key_is_scoped_per_workflow():
    @pw.workflow("start.keyed_a")
    def keyed_a(wf, input):
        return "a"

    @pw.workflow("start.keyed_b")
    def keyed_b(wf, input):
        return "b"

    a = pw.start_workflow("start.keyed_a", {}, inline=True, idempotency_key="same")
    b = pw.start_workflow("start.keyed_b", {}, inline=True, idempotency_key="same")

    assert a != b
    assert (load_run(a).output, load_run(b).output) == ("a", "b")


@transactional
def test_start_workflow__keys_of_different_scopes_never_meet():
    @pw.workflow("start.scoped")
    def scoped(wf, input):
        return input

    acme = pw.start_workflow("start.scoped", {"n": 1}, idempotency_key="order-7", scope="acme")
    # Another tenant's same key with another input: a run of its own, not a conflict.
    globex = pw.start_workflow("start.scoped", {"n": 2}, idempotency_key="order-7", scope="globex")
    unscoped = pw.start_workflow("start.scoped", {"n": 3}, idempotency_key="order-7")
    again = pw.start_workflow("start.scoped", {"n": 1}, idempotency_key="order-7", scope="acme")

    assert len({acme, globex, unscoped}) == 3
    assert again == acme
    with pytest.raises(pw.IdempotencyConflict):
        pw.start_workflow("start.scoped", {"n": 9}, idempotency_key="order-7", scope="globex")
    stored = WorkflowRun.objects.filter(workflow="start.scoped").order_by("idempotency_scope")
    assert list(stored.values_list("idempotency_scope", "idempotency_key")) == [
        ("", "order-7"),
        ("acme", "order-7"),
        ("globex", "order-7"),
    ]


@transactional
@pytest.mark.parametrize(
    ("scope", "mentioned"),
    [("s" * 256, "256 characters"), (7, "must be a string"), ("a\x00b", "NUL")],
)
def test_start_workflow__a_scope_that_cannot_be_stored_is_refused_whole(scope, mentioned):
    @pw.workflow("start.bad_scope")
    def bad_scope(wf, input):
        return input

    with pytest.raises(pw.InvalidInput, match=mentioned):
        pw.start_workflow("start.bad_scope", idempotency_key="k", scope=scope)

    assert not WorkflowRun.objects.filter(workflow="start.bad_scope").exists()
    # The longest scope that fits is kept whole, never truncated.
    run_id = pw.start_workflow("start.bad_scope", idempotency_key="k", scope="s" * 255)
    assert load_run(run_id).idempotency_scope == "s" * 255


@transactional
def test_start_workflow__started_by_shows_as_the_username():
    seen = []

    @pw.step_function("start.whoami")
    def whoami(data, ctx):
        seen.append(ctx.started_by)
        return ctx.started_by

    @pw.workflow("start.owned")
    def owned(wf, input):
        return wf.do("who", "start.whoami")

    alice = get_user_model().objects.create_user("alice")

    run_id = pw.start_workflow("start.owned", {}, inline=True, started_by=alice)

    assert load_run(run_id).started_by_id == alice.pk
    assert pw.get_run_status(run_id)["started_by"] == "alice"
    assert seen == ["alice"]


@transactional
def test_start_workflow__subject_is_stored_as_a_generic_foreign_key():
    @pw.workflow("start.about_order")
    def about_order(wf, input):
        return None

    order = Order.objects.create(customer="Ada", amount="12.50")

    run_id = pw.start_workflow("start.about_order", {}, inline=True, subject=order)

    run = load_run(run_id)
    assert run.subject_type == ContentType.objects.get_for_model(Order)
    assert run.subject_id == str(order.pk)
    assert run.subject == order


@pytest.mark.django_db
def test_start_workflow__unknown_workflow_raises_workflow_not_found():
    with pytest.raises(pw.WorkflowNotFound) as caught:
        pw.start_workflow("start.no_such_workflow", {}, inline=True)

    assert caught.value.code == "WORKFLOW_NOT_FOUND"
    assert not WorkflowRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad_input", [{"when": object()}, {"x": float("nan")}, {"s": "nul\x00"}, {1, 2}]
)
def test_start_workflow__non_json_input_raises_invalid_input(bad_input):
    @pw.workflow("start.any_input")
    def any_input(wf, input):
        return None

    with pytest.raises(pw.InvalidInput) as caught:
        pw.start_workflow("start.any_input", bad_input, inline=True)

    assert caught.value.code == "INVALID_INPUT"
    assert not WorkflowRun.objects.exists()
    assert not WorkflowStep.objects.exists()


@transactional
def test_start_workflow__input_is_stored_as_its_json_round_trip():
    seen = []

    @pw.workflow("start.round_trip_input")
    def round_trip_input(wf, input):
        seen.append(input)
        return None

    run_id = pw.start_workflow("start.round_trip_input", {"pair": (1, 2)}, inline=True)

    assert seen == [{"pair": [1, 2]}]
    assert load_run(run_id).input == {"pair": [1, 2]}


@transactional
def test_start_workflow__unstorable_output_fails_the_run():
    @pw.workflow("start.bad_output")
    def bad_output(wf, input):
        return {"ratio": float("nan")}

    run_id = pw.start_workflow("start.bad_output", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.FAILED, None)
    assert run.error["code"] == "OUTPUT_NOT_SERIALIZABLE"
    assert {"code", "message", "type"} <= set(run.error)


@transactional
def test_start_workflow__workflow_error_in_the_body_keeps_its_code():
    @pw.workflow("start.raises_workflow_error")
    def raises_workflow_error(wf, input):
        raise pw.InvalidInput("order id missing")

    run_id = pw.start_workflow("start.raises_workflow_error", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.error["message"]) == (
        RunStatus.FAILED,
        "INVALID_INPUT",
        "order id missing",
    )
