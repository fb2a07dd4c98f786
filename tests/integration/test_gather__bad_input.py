"""What wf.gather and wf.map refuse (InvalidInput naming the problem), before anything runs."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def steps() -> None:
    @pw.step_function("bad.local")
    def local(data: int, ctx: pw.StepContext) -> int:
        return data


def failure_of(body) -> dict:
    """Run `body` as a workflow (inline); the error its run failed with. Nothing ran first."""
    pw.workflow("bad.body")(body)
    run_id = pw.start_workflow("bad.body", {}, inline=True)
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()  # refused before any step
    return run.error


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            lambda wf, input: wf.gather(wf.call("a", "bad.local", 1), wf.call("a", "bad.local", 2)),
            "the key 'a' is used by two of its members",
        ),
        (
            lambda wf, input: wf.gather(wf.call("a", "bad.local", 1), 42),
            "member 1 is a int, neither a step call (wf.call) nor a callable",
        ),
        (lambda wf, input: wf.map("m", "bad.local", {"a": 1}), "items must be a list, not dict"),
        (lambda wf, input: wf.map("m", "bad.local", (1, 2)), "items must be a list, not tuple"),
        (
            lambda wf, input: wf.map("m", "bad.local", [1], max_in_flight=0),
            "max_in_flight must be a whole number of at least 1",
        ),
        (
            lambda wf, input: wf.gather(wf.call("a", "bad.local", 1), return_exceptions="yes"),
            "return_exceptions must be True or False",
        ),
        (lambda wf, input: wf.call("a#1", "bad.local", 1), "reserved character"),
        (
            lambda wf, input: wf.call("a", lambda: 1, atomic=True),
            "atomic=True is for step functions",
        ),
        (
            lambda wf, input: wf.map("m", "bad.local", [1, 2, 3, 4]),
            "4 items, more than MAX_FAN_OUT (3)",
        ),
        (
            lambda wf, input: wf.gather(*[wf.call(f"k{i}", "bad.local", i) for i in range(4)]),
            "4 members, more than MAX_FAN_OUT (3)",
        ),
    ],
    ids=[
        "same-key-twice",
        "not-a-member",
        "map-of-a-dict",
        "map-of-a-tuple",
        "max-in-flight-zero",
        "return-exceptions-not-bool",
        "reserved-key",
        "atomic-callable",
        "map-over-max-fan-out",
        "gather-over-max-fan-out",
    ],
)
def test_gather__bad_input_fails_the_body_naming_the_problem(settings, body, words):
    settings.PIKKU_WORKFLOWS = {"MAX_FAN_OUT": 3}
    error = failure_of(body)
    assert error["code"] == "INVALID_INPUT"
    assert words in error["message"]


def test_gather__a_step_call_made_directly_runs_like_one_from_wf_call():
    def body(wf: pw.Workflow, input: dict) -> list:
        return wf.gather(pw.StepCall("a", "bad.local", 1), wf.call("b", "bad.local", 2))

    pw.workflow("bad.direct")(body)
    assert pw.run_to_completion("bad.direct", {}) == [1, 2]


def test_gather__two_branches_reaching_one_key_is_refused():
    def body(wf: pw.Workflow, input: dict) -> list:
        return wf.gather(
            lambda: wf.do("same", "bad.local", 1), lambda: wf.do("same", "bad.local", 2)
        )

    pw.workflow("bad.branches")(body)
    run = WorkflowRun.objects.get(pk=pw.start_workflow("bad.branches", {}, inline=True))
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "INVALID_INPUT"
    assert "reached by two members of a gather" in run.error["message"]


def test_gather__a_branch_s_own_exception_is_its_failure_the_other_members_run():
    def body(wf: pw.Workflow, input: dict) -> list:
        def branch() -> int:
            raise KeyError("missing")

        results = wf.gather(branch, wf.call("ok", "bad.local", 1), return_exceptions=True)
        return [type(r).__name__ if isinstance(r, Exception) else r for r in results]

    pw.workflow("bad.returned")(body)
    assert pw.run_to_completion("bad.returned", {}) == ["KeyError", 1]
