"""Child runs: a `wf.do` whose target is a workflow starts a run, inline in an inline parent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _run(run_id) -> WorkflowRun:
    return WorkflowRun.objects.get(pk=run_id)


def _step(run_id, key: str) -> WorkflowStep:
    return WorkflowStep.objects.get(run_id=run_id, step_key=key)


def _children(run_id) -> list[WorkflowRun]:
    return list(WorkflowRun.objects.filter(parent_run_id=run_id).order_by("created_at"))


def test_child__runs_inline_and_returns_its_output():
    @pw.workflow("children.invoice")
    def invoice(wf, input):
        number = wf.do("number", lambda: f"INV-{input['order']}")
        return {"invoice": number, "lines": (1, 2)}

    @pw.workflow("children.order")
    def order(wf, input):
        made = wf.do("invoice", "children.invoice", {"order": input["id"]})
        return {"made": made}

    run_id = pw.start_workflow("children.order", {"id": 7}, inline=True)

    parent = _run(run_id)
    assert parent.status == RunStatus.COMPLETED
    assert parent.output == {"made": {"invoice": "INV-7", "lines": [1, 2]}}
    step = _step(run_id, "invoice")
    (child,) = _children(run_id)
    assert (child.workflow, child.status, child.input) == (
        "children.invoice",
        RunStatus.COMPLETED,
        {"order": 7},
    )
    assert (child.parent_run_id, child.parent_step_id) == (parent.pk, step.pk)
    assert child.inline is True
    assert (step.status, step.kind, step.child_run_id) == (StepStatus.SUCCEEDED, "child", child.pk)
    assert step.result == {"invoice": "INV-7", "lines": [1, 2]}


def test_child__inherits_who_started_the_parent():
    seen = []

    @pw.step_function("children.whoami")
    def whoami(data, ctx):
        seen.append(ctx.started_by)

    @pw.workflow("children.inner")
    def inner(wf, input):
        wf.do("who", "children.whoami")

    @pw.workflow("children.outer")
    def outer(wf, input):
        wf.do("inner", "children.inner")

    bob = get_user_model().objects.create_user("bob")

    run_id = pw.start_workflow("children.outer", {}, inline=True, started_by=bob)

    (child,) = _children(run_id)
    assert child.started_by_id == bob.pk
    assert seen == ["bob"]


def test_child__failure_fails_the_parent_step_and_the_run():
    @pw.workflow("children.broken")
    def broken(wf, input):
        raise RuntimeError("out of paper")

    @pw.workflow("children.needs_broken")
    def needs_broken(wf, input):
        wf.do("invoice", "children.broken", {}, retries=0)
        return "not reached"

    run_id = pw.start_workflow("children.needs_broken", {}, inline=True)

    (child,) = _children(run_id)
    assert child.status == RunStatus.FAILED
    step = _step(run_id, "invoice")
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert "out of paper" in step.error["message"]
    assert step.error["child_run_id"] == str(child.pk)
    parent = _run(run_id)
    assert parent.status == RunStatus.FAILED
    assert (parent.error["code"], parent.error["step_key"]) == ("STEP_FAILED", "invoice")


def test_child__retry_starts_a_new_child_run():
    attempts = []

    @pw.workflow("children.flaky")
    def flaky(wf, input):
        attempts.append(wf.run_id)
        if len(attempts) == 1:
            raise ConnectionError("printer jammed")
        return "printed"

    @pw.workflow("children.retries_child")
    def retries_child(wf, input):
        return wf.do("print", "children.flaky", {}, retries=2, retry_delay=0)

    run_id = pw.start_workflow("children.retries_child", {}, inline=True)

    parent = _run(run_id)
    assert (parent.status, parent.output) == (RunStatus.COMPLETED, "printed")
    first, second = _children(run_id)
    assert (first.status, second.status) == (RunStatus.FAILED, RunStatus.COMPLETED)
    assert attempts == [str(first.pk), str(second.pk)]
    step = _step(run_id, "print")
    assert (step.status, step.attempt, step.child_run_id) == (
        StepStatus.SUCCEEDED,
        2,
        second.pk,
    )
    assert {first.parent_step_id, second.parent_step_id} == {step.pk}
    history = list(
        WorkflowStepHistory.objects.filter(step=step)
        .order_by("attempt")
        .values_list("attempt", "status")
    )
    assert history == [(1, StepStatus.FAILED), (2, StepStatus.SUCCEEDED)]


def test_child__exhausted_retries_start_one_child_per_attempt():
    @pw.workflow("children.always_broken")
    def always_broken(wf, input):
        raise RuntimeError("still broken")

    @pw.workflow("children.gives_up")
    def gives_up(wf, input):
        try:
            wf.do("print", "children.always_broken", {}, retries=2, retry_delay=0)
        except pw.StepFailed as exc:
            return {"gave_up": exc.step_key}
        return "not reached"

    run_id = pw.start_workflow("children.gives_up", {}, inline=True)

    assert _run(run_id).output == {"gave_up": "print"}
    children = _children(run_id)
    assert [child.status for child in children] == [RunStatus.FAILED] * 3
    assert _step(run_id, "print").attempt == 3


def test_child__parked_child_parks_the_parent_step_as_waiting():
    @pw.workflow("children.sleepy")
    def sleepy(wf, input):
        wf.sleep("nap", "1h")
        return "awake"

    @pw.workflow("children.waits")
    def waits(wf, input):
        return wf.do("nap", "children.sleepy", {})

    run_id = pw.start_workflow("children.waits", {}, inline=True)

    (child,) = _children(run_id)
    assert child.status == RunStatus.RUNNING
    assert _run(run_id).status == RunStatus.RUNNING
    step = _step(run_id, "nap")
    assert (step.status, step.child_run_id) == (StepStatus.WAITING, child.pk)
    assert pw.get_run_status(run_id)["waiting_on"] == {
        "kind": "child",
        "step_key": "nap",
        "child_run_id": str(child.pk),
    }


def test_child__ending_on_a_later_pass_settles_the_parent_step_and_queues_the_parent():
    from django_q.models import OrmQ

    from pikku_workflows.engine.replay.orchestrator import orchestrate

    @pw.workflow("children.later")
    def later(wf, input):
        wf.sleep("nap", "1h")
        return "awake"

    @pw.workflow("children.waits_for_later")
    def waits_for_later(wf, input):
        return {"child": wf.do("nap", "children.later", {})}

    run_id = pw.start_workflow("children.waits_for_later", {}, inline=True)
    (child,) = _children(run_id)
    # What the timer loop does when the child's sleep is over: the row is due, a pass replays.
    WorkflowStep.objects.filter(run_id=child.pk, step_key="nap").update(
        wake_at=timezone.now() - timedelta(seconds=1)
    )
    queued = OrmQ.objects.count()

    orchestrate(child.pk)

    assert _run(child.pk).status == RunStatus.COMPLETED
    step = _step(run_id, "nap")
    assert (step.status, step.result) == (StepStatus.SUCCEEDED, "awake")
    assert OrmQ.objects.count() == queued + 1  # the parent's pass, for a worker

    orchestrate(run_id)

    parent = _run(run_id)
    assert (parent.status, parent.output) == (RunStatus.COMPLETED, {"child": "awake"})


def test_child__queued_parent_pass_starts_the_child_on_a_worker():
    from django_q.models import OrmQ

    from pikku_workflows.engine.replay.orchestrator import orchestrate

    calls = []

    @pw.workflow("children.queued_child")
    def queued_child(wf, input):
        calls.append(1)
        return "child done"

    @pw.workflow("children.queued_parent")
    def queued_parent(wf, input):
        return wf.do("child", "children.queued_child", {"n": 1})

    run_id = pw.start_workflow("children.queued_parent", {})
    queued = OrmQ.objects.count()

    orchestrate(run_id)

    (child,) = _children(run_id)
    assert calls == []
    assert (child.status, child.inline, child.input) == (RunStatus.RUNNING, False, {"n": 1})
    assert _step(run_id, "child").status == StepStatus.WAITING
    assert OrmQ.objects.count() == queued + 1  # the child's first pass

    orchestrate(child.pk)  # a worker runs the child; it ends and queues the parent
    orchestrate(run_id)

    assert calls == [1]
    assert (_run(run_id).status, _run(run_id).output) == (RunStatus.COMPLETED, "child done")
