"""`wf.patched(id)`: True for runs that reach the patch on code that has it (a marker step is
recorded and found on every replay), False for runs whose history passed that point without it
(they keep the old branch); `wf.deprecate_patch(id)` for the release that drops the old branch."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepKind, StepStatus
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ran() -> list[str]:
    seen: list[str] = []
    for name in ("reserve", "old_shipping", "free_shipping", "invoice"):

        def step(data, ctx, name=name):
            seen.append(name)
            return name

        step.__qualname__ = f"patch_{name}"
        pw.step_function(f"patch.{name}")(step)
    return seen


def deploy(body) -> None:
    registry.workflows.pop("patch.order", None)
    pw.workflow("patch.order")(body)


def old_code(wf, input):
    wf.do("reserve", "patch.reserve")
    wf.sleep("wait", input.get("wait", "1h"))
    shipping = wf.do("shipping", "patch.old_shipping")
    wf.sleep("settle", "1h")
    return wf.do("invoice", "patch.invoice", {"shipping": shipping})


def patched_code(wf, input):
    wf.do("reserve", "patch.reserve")
    wf.sleep("wait", input.get("wait", "1h"))
    if wf.patched("free-shipping"):
        shipping = wf.do("free_shipping", "patch.free_shipping")
    else:
        shipping = wf.do("shipping", "patch.old_shipping")
    wf.sleep("settle", "1h")
    return wf.do("invoice", "patch.invoice", {"shipping": shipping})


def deprecated_code(wf, input):
    wf.do("reserve", "patch.reserve")
    wf.sleep("wait", input.get("wait", "1h"))
    wf.deprecate_patch("free-shipping")
    shipping = wf.do("free_shipping", "patch.free_shipping")
    wf.sleep("settle", "1h")
    return wf.do("invoice", "patch.invoice", {"shipping": shipping})


def wake(run_id: str, key: str) -> None:
    """The sleep `key` is due now: the timer loop fires it and the run goes on."""
    WorkflowStep.objects.filter(run_id=run_id, step_key=key).update(wake_at="2000-01-01T00:00Z")
    pw.recover()
    drain_queue()


def markers(run_id: str) -> list[tuple]:
    return list(
        WorkflowStep.objects.filter(run_id=run_id, kind=StepKind.PATCH).values_list(
            "step_key", "status", "from_step_key"
        )
    )


def test_patched__a_new_run_takes_the_new_branch_and_records_a_marker(ran):
    deploy(patched_code)
    run_id = pw.start_workflow("patch.order", {"wait": 0})
    drain_queue()

    assert markers(run_id) == [("__patch:free-shipping", StepStatus.SUCCEEDED, "wait")]
    wake(run_id, "settle")  # a later pass replays past the marker: still True, no second one

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "invoice")
    assert ran == ["reserve", "free_shipping", "invoice"]
    assert len(markers(run_id)) == 1


def test_patched__a_run_whose_history_passed_the_point_keeps_the_old_branch(ran):
    deploy(old_code)
    run_id = pw.start_workflow("patch.order", {"wait": 0})
    drain_queue()  # reserve, wait, shipping (old) recorded; parked on `settle`
    assert ran == ["reserve", "old_shipping"]

    deploy(patched_code)
    wake(run_id, "settle")

    run = load_run(run_id)
    assert (run.status, run.error) == (RunStatus.COMPLETED, None)
    assert ran == ["reserve", "old_shipping", "invoice"]
    assert markers(run_id) == []


def test_patched__an_old_run_that_reaches_the_point_on_new_code_takes_the_new_branch(ran):
    deploy(old_code)
    run_id = pw.start_workflow("patch.order", {})
    drain_queue()  # parked on `wait`, before the patch's point

    deploy(patched_code)
    wake(run_id, "wait")
    wake(run_id, "settle")

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert ran == ["reserve", "free_shipping", "invoice"]
    assert [key for key, _, _ in markers(run_id)] == ["__patch:free-shipping"]


def test_patched__gives_one_answer_per_pass_for_the_same_patch(ran):
    answers = []

    @pw.workflow("patch.twice")
    def twice(wf, input):
        answers.append(wf.patched("p"))
        answers.append(wf.patched("p"))
        wf.do("reserve", "patch.reserve")
        answers.append(wf.patched("p"))
        return None

    run_id = pw.start_workflow("patch.twice", {}, inline=True)

    assert answers == [True, True, True]
    assert len(markers(run_id)) == 1


def test_deprecate_patch__runs_with_the_marker_and_new_runs_replay_without_a_branch(ran):
    deploy(patched_code)
    with_marker = pw.start_workflow("patch.order", {"wait": 0})
    drain_queue()  # the marker is recorded; parked on `settle`

    deploy(deprecated_code)
    new_run = pw.start_workflow("patch.order", {"wait": 0})
    drain_queue()
    wake(with_marker, "settle")
    wake(new_run, "settle")

    for run_id in (with_marker, new_run):
        assert load_run(run_id).status == RunStatus.COMPLETED
        assert [key for key, _, _ in markers(run_id)] == ["__patch:free-shipping"]
    assert ran.count("old_shipping") == 0


def test_patched__markers_left_by_a_removed_patch_do_not_look_like_history_ahead(ran):
    deploy(patched_code)
    run_id = pw.start_workflow("patch.order", {"wait": 0})
    drain_queue()  # marker recorded, parked on `settle`

    def later_code(wf, input):
        # The free-shipping patch is gone for good; a new patch sits before the last step.
        wf.do("reserve", "patch.reserve")
        wf.sleep("wait", input.get("wait", "1h"))
        shipping = wf.do("free_shipping", "patch.free_shipping")
        wf.sleep("settle", "1h")
        if wf.patched("new-invoice"):
            return {"new_invoice": shipping}
        return wf.do("invoice", "patch.invoice", {"shipping": shipping})

    deploy(later_code)
    wake(run_id, "settle")

    assert load_run(run_id).output == {"new_invoice": "free_shipping"}
