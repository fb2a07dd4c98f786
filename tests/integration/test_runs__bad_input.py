"""Every bad input to the operations is a clear `WorkflowError` and writes nothing: wrong types,
unknown names, values jsonb refuses, oversized values, keys too long for their column (never
truncated), users that are no user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import override_settings
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.exceptions import InvalidInput, WorkflowError
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.status import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def greeting() -> None:
    @pw.step_function("bad.greet")
    def greet(data: Any, ctx: pw.StepContext) -> str:
        return "hello"

    @pw.workflow("bad.hello")
    def hello(wf: pw.Workflow, input: Any) -> str:
        return wf.do("greet", "bad.greet", {})

    @pw.workflow("bad.nap")
    def nap(wf: pw.Workflow, input: Any) -> str:
        wf.sleep("nap", "1h")
        return "rested"


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


def unsaved_user() -> Any:
    return get_user_model()(username="nobody-yet")


START_CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "name not a string": (lambda: pw.start_workflow(["bad.hello"]), "workflow name"),
    "unknown name": (lambda: pw.start_workflow("bad.nope"), "bad.nope"),
    "lone surrogate in input": (
        lambda: pw.start_workflow("bad.hello", {"a": "\ud800"}),
        "surrogate",
    ),
    "surrogate in an input key": (
        lambda: pw.start_workflow("bad.hello", {"\udfff": 1}),
        "surrogate",
    ),
    "input nested 5000 deep": (lambda: pw.start_workflow("bad.hello", deep(5000)), "nested"),
    # Deep enough for Python to encode, too deep for what walks it later in a pass.
    "input nested 300 deep": (
        lambda: pw.start_workflow("bad.hello", deep(300)),
        "nested deeper than 256 levels",
    ),
    "graph definition nested 10000 deep": (
        lambda: pw.graph_workflow(
            "bad.deep_graph",
            {"entry": "a", "nodes": {"a": {"function": "bad.greet", "input": deep(10_000)}}},
        ),
        "nested deeper than 256 levels",
    ),
    "NUL in input": (lambda: pw.start_workflow("bad.hello", {"a": "x\x00"}), "NUL"),
    "input not JSON": (lambda: pw.start_workflow("bad.hello", {"a": object()}), "input"),
    "idempotency key too long": (
        lambda: pw.start_workflow("bad.hello", idempotency_key="k" * 256),
        "255",
    ),
    "NUL in idempotency key": (
        lambda: pw.start_workflow("bad.hello", idempotency_key="a\x00b"),
        "NUL",
    ),
    "surrogate in idempotency key": (
        lambda: pw.start_workflow("bad.hello", idempotency_key="a\ud800"),
        "surrogate",
    ),
    "idempotency key not a string": (
        lambda: pw.start_workflow("bad.hello", idempotency_key=42),
        "idempotency_key",
    ),
    "started_by anonymous": (
        lambda: pw.start_workflow("bad.hello", started_by=AnonymousUser()),
        "started_by",
    ),
    "started_by a username": (
        lambda: pw.start_workflow("bad.hello", started_by="alice"),
        "started_by",
    ),
    "started_by unsaved": (
        lambda: pw.start_workflow("bad.hello", started_by=unsaved_user()),
        "started_by",
    ),
    "subject not a model instance": (
        lambda: pw.start_workflow("bad.hello", subject=object()),
        "subject",
    ),
    "subject unsaved": (
        lambda: pw.start_workflow("bad.hello", subject=unsaved_user()),
        "subject",
    ),
    "inline not a bool": (lambda: pw.start_workflow("bad.hello", inline="yes"), "inline"),
    "timeout a string": (lambda: pw.run_to_completion("bad.hello", timeout="5"), "timeout"),
    "timeout negative": (lambda: pw.run_to_completion("bad.hello", timeout=-1), "timeout"),
}


@pytest.mark.parametrize("case", START_CASES)
def test_start__bad_input_is_a_clear_error_and_writes_nothing(case):
    call, mentioned = START_CASES[case]

    with pytest.raises(WorkflowError) as caught:
        call()

    assert mentioned in caught.value.message
    assert not WorkflowRun.objects.exists()
    assert not OrmQ.objects.exists()


def test_start__a_model_instance_in_the_input_names_its_key_and_the_remedy():
    user = get_user_model().objects.create_user("ada")

    with pytest.raises(InvalidInput) as caught:
        pw.start_workflow("bad.hello", {"order": 7, "user": user})

    assert caught.value.message == (
        "The input of 'bad.hello' is not storable JSON: input['user'] is a User: pass its pk, "
        "or subject="
    )
    with pytest.raises(InvalidInput, match=r"input\['lines'\]\[1\] is a set, which is not JSON"):
        pw.start_workflow("bad.hello", {"lines": [1, {2}]})
    assert not WorkflowRun.objects.exists()


def test_step__a_model_instance_in_its_data_names_its_key():
    user = get_user_model().objects.create_user("grace")

    @pw.workflow("bad.passes_a_user")
    def passes_a_user(wf, input):
        return wf.do("greet", "bad.greet_a_user", {"who": user})

    @pw.step_function("bad.greet_a_user")
    def greet(data, ctx):
        return "hello"

    run_id = pw.start_workflow("bad.passes_a_user", {}, inline=True)

    error = WorkflowRun.objects.get(pk=run_id).error
    assert (
        "Step 'greet': data is not storable JSON: data['who'] is a User: pass its pk"
        in (error["message"])
    )


def test_start__input_over_max_payload_bytes_is_refused_before_any_write():
    with override_settings(PIKKU_WORKFLOWS={"MAX_PAYLOAD_BYTES": 1_000}):
        with pytest.raises(InvalidInput, match="1000 bytes"):
            pw.start_workflow("bad.hello", {"text": "x" * 1_000})
        pw.start_workflow("bad.hello", {"text": "x" * 900})
    assert WorkflowRun.objects.count() == 1


def test_start__the_same_long_idempotency_key_twice_is_the_same_clear_error():
    for _ in range(2):  # no run stored under a truncated key, so no IntegrityError the 2nd time
        with pytest.raises(InvalidInput):
            pw.start_workflow("bad.hello", idempotency_key="k" * 300)
    assert not WorkflowRun.objects.exists()


def test_start__a_key_of_exactly_255_characters_is_kept_whole():
    run_id = pw.start_workflow("bad.hello", idempotency_key="k" * 255)
    assert WorkflowRun.objects.get(pk=run_id).idempotency_key == "k" * 255
    assert pw.start_workflow("bad.hello", idempotency_key="k" * 255) == run_id


@pytest.fixture
def parked_run() -> str:
    return pw.start_workflow("bad.nap", {}, inline=True)


OPERATION_CASES: dict[str, tuple[Callable[[str], Any], str]] = {
    "reason with NUL": (lambda run: pw.cancel_run(run, reason="no\x00"), "NUL"),
    "reason not a string": (lambda run: pw.suspend_run(run, reason=["why"]), "reason"),
    "reason too long": (lambda run: pw.cancel_run(run, reason="r" * 2001), "2000"),
    "by a username": (lambda run: pw.cancel_run(run, by="alice"), "by"),
    "by anonymous": (lambda run: pw.suspend_run(run, by=AnonymousUser()), "by"),
    "by unsaved": (lambda run: pw.cancel_run(run, by=unsaved_user()), "by"),
    "fork from a step with NUL": (lambda run: pw.fork_run(run, from_step="x\x00"), "from_step"),
    "malformed run id": (lambda run: pw.cancel_run("not-a-uuid"), "not-a-uuid"),
}


@pytest.mark.parametrize("case", OPERATION_CASES)
def test_operations__bad_input_is_a_clear_error_and_changes_nothing(parked_run, case):
    call, mentioned = OPERATION_CASES[case]

    with pytest.raises(WorkflowError) as caught:
        call(parked_run)

    assert mentioned in caught.value.message
    assert WorkflowRun.objects.get(pk=parked_run).status == RunStatus.RUNNING
    assert not WorkflowAuditEntry.objects.exists()
