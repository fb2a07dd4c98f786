"""`pw.fork_run`: a new run of an ended run's workflow and input that reuses the results recorded
before `from_step` (their step functions are not called again) and executes again from there."""

from __future__ import annotations

import contextlib

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.models import (
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowStep,
    WorkflowStepHistory,
)
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.testing import drain
from tests.queue import queued_tasks
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


def _steps(run_id: str) -> list[tuple]:
    return list(
        WorkflowStep.objects.filter(run_id=run_id)
        .order_by("created_at")
        .values_list("step_key", "status", "copied")
    )


class Pipeline:
    """Counted step functions; `publish` fails while `broken` is set."""

    def __init__(self) -> None:
        self.broken = False
        self.calls: list[str] = []


@pytest.fixture
def pipeline() -> Pipeline:
    state = Pipeline()

    def counted(name: str):
        def step(data, ctx):
            state.calls.append(name)
            if name == "publish" and state.broken:
                raise RuntimeError("publisher bug")
            return {name: data}

        return step

    for name in ("extract", "transform", "publish"):
        pw.step_function(f"fork.{name}")(counted(name))

    @pw.workflow("fork.etl")
    def etl(wf, input):
        extracted = wf.do("extract", "fork.extract", input["source"])
        transformed = wf.do("transform", "fork.transform", extracted, retries=0)
        return wf.do("publish", "fork.publish", transformed, retries=0)

    return state


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops")


def test_fork_run__from_a_middle_step_reuses_earlier_results_and_reruns_the_rest(pipeline, ops):
    source_id = pw.start_workflow("fork.etl", {"source": "s3://a"}, inline=True)
    assert pipeline.calls == ["extract", "transform", "publish"]
    OrmQ.objects.all().delete()

    fork_id = pw.fork_run(source_id, from_step="transform", by=ops, reason="redo transform")

    assert isinstance(fork_id, str) and fork_id != source_id
    fork = load_run(fork_id)
    assert (fork.workflow, fork.input, str(fork.forked_from_id)) == (
        "fork.etl",
        {"source": "s3://a"},
        source_id,
    )
    assert (fork.status, fork.inline, fork.started_by) == (RunStatus.RUNNING, False, ops)
    assert _steps(fork_id) == [("extract", StepStatus.SUCCEEDED, True)]
    assert queued_tasks() == [(ORCHESTRATE, (fork_id,))]

    drain()

    assert pipeline.calls[3:] == ["transform", "publish"]
    fork = load_run(fork_id)
    assert fork.status == RunStatus.COMPLETED
    assert fork.output == load_run(source_id).output
    assert _steps(fork_id) == [
        ("extract", StepStatus.SUCCEEDED, True),
        ("transform", StepStatus.SUCCEEDED, False),
        ("publish", StepStatus.SUCCEEDED, False),
    ]


def test_fork_run__copied_step_keeps_its_result_and_lineage_with_one_history_row(pipeline):
    source_id = pw.start_workflow("fork.etl", {"source": "s3://b"}, inline=True)

    fork_id = pw.fork_run(source_id, from_step="publish")

    source = {s.step_key: s for s in WorkflowStep.objects.filter(run_id=source_id)}
    for key in ("extract", "transform"):
        copied = WorkflowStep.objects.get(run_id=fork_id, step_key=key)
        assert (copied.result, copied.data, copied.function_name, copied.from_step_key) == (
            source[key].result,
            source[key].data,
            source[key].function_name,
            source[key].from_step_key,
        )
        assert (copied.attempt, copied.copied) == (1, True)
        history = WorkflowStepHistory.objects.filter(step=copied).values_list(
            "attempt", "status", "result"
        )
        assert list(history) == [(1, "succeeded", source[key].result)]


def test_fork_run__audit_row_goes_on_the_source_run(pipeline, ops):
    source_id = pw.start_workflow("fork.etl", {"source": "s3://c"}, inline=True)

    fork_id = pw.fork_run(source_id, from_step="transform", by=ops, reason="redo")

    entry = WorkflowAuditEntry.objects.get(run_id=source_id)
    assert (entry.action, entry.user, entry.reason) == ("fork", ops, "redo")
    assert entry.payload == {
        "status_before": "completed",
        "status_after": "completed",
        "new_run_id": fork_id,
        "from_step": "transform",
        "copied_steps": ["extract"],
    }
    # ... and one on the new run, naming its source: both run pages tell the story.
    forked = WorkflowAuditEntry.objects.get(run_id=fork_id)
    assert (forked.action, forked.user, forked.reason) == ("fork", ops, "redo")
    assert forked.payload == {
        "status_before": "",
        "status_after": "running",
        "forked_from": source_id,
        "from_step": "transform",
        "copied_steps": ["extract"],
    }
    assert load_run(source_id).status == RunStatus.COMPLETED


def test_fork_run__of_a_failed_run_redoes_the_broken_step_after_the_fix(pipeline):
    pipeline.broken = True
    source_id = pw.start_workflow("fork.etl", {"source": "s3://d"}, inline=True)
    assert load_run(source_id).status == RunStatus.FAILED
    pipeline.broken = False

    fork_id = pw.fork_run(source_id, from_step="publish")
    drain()

    assert pipeline.calls == ["extract", "transform", "publish", "publish"]
    assert load_run(fork_id).status == RunStatus.COMPLETED
    assert load_run(source_id).status == RunStatus.FAILED


def test_fork_run__from_the_first_step_reruns_everything(pipeline):
    source_id = pw.start_workflow("fork.etl", {"source": "s3://e"}, inline=True)

    fork_id = pw.fork_run(source_id, from_step="extract")
    drain()

    assert pipeline.calls == ["extract", "transform", "publish"] * 2
    assert not WorkflowStep.objects.filter(run_id=fork_id, copied=True).exists()


def test_fork_run__earlier_steps_that_did_not_succeed_run_again():
    calls = []

    @pw.step_function("fork.optional")
    def optional(data, ctx):
        calls.append("optional")
        raise RuntimeError("optional service down")

    @pw.workflow("fork.tolerant")
    def tolerant(wf, input):
        with contextlib.suppress(pw.StepFailed):
            wf.do("optional", "fork.optional", {}, retries=0)
        wf.do("main", lambda: calls.append("main") or "main")
        return wf.do("last", lambda: calls.append("last") or "last")

    source_id = pw.start_workflow("fork.tolerant", {}, inline=True)

    fork_id = pw.fork_run(source_id, from_step="last")
    drain()

    assert calls == ["optional", "main", "last", "optional", "last"]
    assert _steps(fork_id) == [
        ("main", StepStatus.SUCCEEDED, True),
        ("optional", StepStatus.FAILED, False),
        ("last", StepStatus.SUCCEEDED, False),
    ]


def test_fork_run__keeps_the_subject_and_the_starter_without_an_operator(pipeline):
    user = get_user_model().objects.create_user("starter")
    source_id = pw.start_workflow(
        "fork.etl", {"source": "s3://f"}, inline=True, started_by=user, subject=user
    )

    fork = load_run(pw.fork_run(source_id, from_step="publish"))

    assert fork.started_by == user
    assert (fork.subject_type, fork.subject_id) == (
        ContentType.objects.get_for_model(user),
        str(user.pk),
    )


@pytest.mark.parametrize("status", ["running", "suspended"])
def test_fork_run__a_run_that_has_not_ended_raises_invalid_transition(status):
    @pw.workflow("fork.live")
    def live(wf, input):
        wf.do("first", lambda: 1)
        if input["status"] == "suspended":
            wf.suspend("hold")
        wf.sleep("nap", "1h")

    source_id = pw.start_workflow("fork.live", {"status": status}, inline=True)
    runs = WorkflowRun.objects.count()

    with pytest.raises(pw.InvalidTransition) as caught:
        pw.fork_run(source_id, from_step="first")

    assert caught.value.code == "INVALID_TRANSITION"
    assert WorkflowRun.objects.count() == runs
    assert not WorkflowAuditEntry.objects.exists()


def test_fork_run__of_a_cancelled_run_is_allowed(pipeline):
    @pw.workflow("fork.cancellable")
    def cancellable(wf, input):
        wf.do("first", lambda: 1)
        wf.sleep("nap", "1h")
        return "done"

    source_id = pw.start_workflow("fork.cancellable", {}, inline=True)
    pw.cancel_run(source_id)

    fork_id = pw.fork_run(source_id, from_step="nap")

    assert _steps(fork_id) == [("first", StepStatus.SUCCEEDED, True)]


@pytest.mark.parametrize("from_step", ["nope", "", None, 3])
def test_fork_run__unknown_from_step_raises_invalid_input(pipeline, from_step):
    source_id = pw.start_workflow("fork.etl", {"source": "s3://g"}, inline=True)
    runs = WorkflowRun.objects.count()

    with pytest.raises(pw.InvalidInput) as caught:
        pw.fork_run(source_id, from_step=from_step)

    assert caught.value.code == "INVALID_INPUT"
    assert WorkflowRun.objects.count() == runs
    assert not WorkflowAuditEntry.objects.exists()


def test_fork_run__unknown_run_raises_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.fork_run("00000000-0000-0000-0000-000000000000", from_step="a")
