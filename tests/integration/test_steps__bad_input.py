"""Bad input inside a workflow body is the body's bug: the call raises `InvalidInput` before
anything is written, so the run fails with INVALID_INPUT and no step is left half made (never a
raw OverflowError, IntegrityError or DataError, never a step stuck running)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def step_functions() -> None:
    @pw.step_function("body.local")
    def local(data: Any, ctx: pw.StepContext) -> str:
        return "ok"

    @pw.step_function("body.queued", inline=False)
    def queued(data: Any, ctx: pw.StepContext) -> str:
        return "ok"


BODY_CASES: dict[str, tuple[Callable[[pw.Workflow], Any], str]] = {
    "sleep of 500000 weeks": (lambda wf: wf.sleep("nap", "500000w"), "duration"),
    "sleep of 10**20 ms": (lambda wf: wf.sleep("nap", 10**20), "duration"),
    "retry delay of 500000 weeks": (
        lambda wf: wf.do("s", "body.local", {}, retry_delay="500000w"),
        "duration",
    ),
    "retries 2**31": (lambda wf: wf.do("s", "body.local", {}, retries=2**31), "retries"),
    "queued timeout of 30 days": (
        lambda wf: wf.do("s", "body.queued", {}, timeout="30d"),
        "timeout",
    ),
    "step key of 260 characters": (lambda wf: wf.do("k" * 260, "body.queued", {}), "255"),
    "step key with NUL": (lambda wf: wf.do("a\x00b", "body.local", {}), "NUL"),
    "step key with a surrogate": (lambda wf: wf.do("a\ud800", "body.local", {}), "surrogate"),
    "data with a surrogate": (lambda wf: wf.do("s", "body.local", {"x": "\ud800"}), "surrogate"),
    "state with a surrogate": (lambda wf: wf.set_state("stage", "\ud800"), "surrogate"),
    "suspend reason with NUL": (lambda wf: wf.suspend("why\x00"), "NUL"),
    "step function name not a string": (lambda wf: wf.do("s", 42, {}), "target"),
}


@pytest.mark.parametrize("case", BODY_CASES)
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "queued"])
def test_body__bad_input_fails_the_run_with_invalid_input_and_writes_no_step(case, inline):
    call, mentioned = BODY_CASES[case]

    @pw.workflow("body.bad")
    def bad(wf: pw.Workflow, input: Any) -> None:
        call(wf)

    run_id = pw.start_workflow("body.bad", {}, inline=inline)
    if not inline:
        from pikku_workflows import tasks

        tasks.orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert mentioned in run.error["message"]
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()


def test_registry__names_longer_than_their_column_are_refused():
    with pytest.raises(pw.InvalidInput, match="200"):
        pw.workflow("w" * 201)(lambda wf, input: None)
    with pytest.raises(pw.InvalidInput, match="200"):
        pw.step_function("f" * 201)(lambda data, ctx: None)
