"""wf.call, wf.gather and wf.map (docs/code-workflows.md, "Parallel steps"): members run until
each finishes or reaches an unfinished step, the queued steps they reached are dispatched in one
statement, the run parks once and is woken once, when the last member settles."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepDispatch, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """The queue path: no pass runs a queued step in place unless a test says so."""


@pytest.fixture
def passes() -> list[str]:
    """Registers `g.*`: each body appends its run id to the list on every pass."""
    seen: list[str] = []

    @pw.step_function("g.double", inline=False)
    def double(data: int, ctx: pw.StepContext) -> int:
        return data * 2

    @pw.step_function("g.fail", inline=False)
    def fail(data: str, ctx: pw.StepContext) -> None:
        raise ValueError(data)

    @pw.step_function("g.local")
    def local(data: int, ctx: pw.StepContext) -> int:
        return data + 100

    @pw.workflow("g.pair")
    def pair(wf: pw.Workflow, input: dict) -> list:
        seen.append(wf.run_id)
        return wf.gather(
            wf.call("a", "g.double", 1),
            wf.call("b", "g.double", 2),
            wf.call("c", "g.local", 3),
        )

    @pw.workflow("g.map")
    def map_(wf: pw.Workflow, input: dict) -> list:
        seen.append(wf.run_id)
        return wf.map("charge", "g.double", input["items"], max_in_flight=input.get("max"))

    @pw.workflow("g.branches")
    def branches(wf: pw.Workflow, input: dict) -> list:
        seen.append(wf.run_id)

        def left() -> int:
            first = wf.do("l1", "g.double", 1)
            return wf.do("l2", "g.double", first)

        return wf.gather(left, lambda: wf.do("r1", "g.local", 5), wf.call("c", "g.double", 7))

    @pw.workflow("g.failing")
    def failing(wf: pw.Workflow, input: dict) -> list:
        seen.append(wf.run_id)
        members = [
            wf.call("ok", "g.double", 1),
            wf.call("bad", "g.fail", "first", retries=0),
            wf.call("worse", "g.fail", "second", retries=0),
        ]
        if input.get("return_exceptions"):
            results = wf.gather(*members, return_exceptions=True)
            return [r if not isinstance(r, pw.StepFailed) else r.step_key for r in results]
        return wf.gather(*members)

    return seen


def start(name: str, input: dict | None = None) -> str:
    """Start a queued run and run its first pass, as a worker would."""
    run_id = pw.start_workflow(name, input or {})
    OrmQ.objects.all().delete()  # taken by the worker
    tasks.orchestrate(run_id)
    return run_id


def run_of(run_id: str) -> WorkflowRun:
    return WorkflowRun.objects.get(pk=run_id)


def test_gather__queued_members_are_dispatched_in_one_statement_and_the_run_parks_once(passes):
    run_id = pw.start_workflow("g.pair", {})
    OrmQ.objects.all().delete()
    with CaptureQueriesContext(connection) as pass_queries:
        tasks.orchestrate(run_id)

    steps = dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    # The in-process member ran in the pass; both queued ones wait for workers.
    assert steps == {"a": "scheduled", "b": "scheduled", "c": "succeeded"}
    assert sorted(queued_tasks()) == [(EXECUTE_STEP, (run_id, "a")), (EXECUTE_STEP, (run_id, "b"))]
    writes = [q["sql"] for q in pass_queries.captured_queries if "django_q_ormq" in q["sql"]]
    assert len(writes) == 1, writes  # both messages, with their steps, in one statement
    assert run_of(run_id).lease_holder is None  # handed back by that statement

    drain_queue()
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, [2, 4, 103])
    assert passes.count(run_id) == 2  # the start, and the one wake when the last settled
    gathers = set(WorkflowStep.objects.filter(run_id=run_id).values_list("gather_key", flat=True))
    assert gathers == {"a"}  # known by its first member's key


def test_gather__only_the_member_that_settles_last_wakes_the_run(passes):
    run_id = start("g.pair")
    OrmQ.objects.all().delete()

    tasks.execute_step(run_id, "a")
    assert queued_tasks() == []  # b is still running: nobody was told
    assert run_of(run_id).status == RunStatus.RUNNING
    assert passes.count(run_id) == 1

    tasks.execute_step(run_id, "b")  # the last: its worker runs the pass itself
    assert run_of(run_id).status == RunStatus.COMPLETED
    assert passes.count(run_id) == 2


def test_map__items_are_keyed_by_position_and_come_back_in_order(passes):
    run_id = start("g.map", {"items": [1, 2, 3, 4]})
    keys = list(
        WorkflowStep.objects.filter(run_id=run_id)
        .order_by("created_at")
        .values_list("step_key", "gather_key", "data")
    )
    assert keys == [(f"charge[{i}]", "charge", i + 1) for i in range(4)]
    drain_queue()
    assert run_of(run_id).output == [2, 4, 6, 8]
    assert passes.count(run_id) == 2


def test_map__max_in_flight_starts_the_next_items_once_those_in_flight_settled(passes):
    run_id = start("g.map", {"items": [1, 2, 3, 4, 5], "max": 2})
    assert set(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", flat=True)) == {
        "charge[0]",
        "charge[1]",
    }
    drain_queue()
    assert run_of(run_id).output == [2, 4, 6, 8, 10]
    assert passes.count(run_id) == 4  # the start, then one wake per wave of two


def test_map__an_empty_list_returns_at_once(passes):
    run_id = start("g.map", {"items": []})
    assert (run_of(run_id).status, run_of(run_id).output) == (RunStatus.COMPLETED, [])


def test_gather__branches_run_their_steps_in_order_beside_the_other_members(passes):
    run_id = start("g.branches")
    # Pass 1: the left branch waits on l1, the right one ran, the call waits: two dispatched.
    statuses = dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    assert statuses == {"l1": "scheduled", "r1": "succeeded", "c": "scheduled"}
    drain_queue()
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, [4, 105, 14])
    lineage = dict(
        WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "from_step_key")
    )
    assert lineage == {"l1": None, "l2": "l1", "r1": None, "c": None}


def test_gather__the_first_failure_in_argument_order_is_raised_once_all_settled(passes):
    run_id = start("g.failing")
    drain_queue()
    run = run_of(run_id)
    assert run.status == RunStatus.FAILED
    assert (run.error["code"], run.error["step_key"]) == ("STEP_FAILED", "bad")
    statuses = dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    assert statuses == {"ok": "succeeded", "bad": "failed", "worse": "failed"}


def test_gather__return_exceptions_gives_step_failed_values_in_place(passes):
    run_id = start("g.failing", {"return_exceptions": True})
    drain_queue()
    assert run_of(run_id).output == [2, "bad", "worse"]


def test_gather__a_single_queued_member_runs_in_place_on_a_worker(settings, passes):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": True}

    @pw.workflow("g.one_queued")
    def one_queued(wf: pw.Workflow, input: dict) -> list:
        return wf.gather(wf.call("q", "g.double", 21), wf.call("l", "g.local", 1))

    run_id = start("g.one_queued")
    run = run_of(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, [42, 101])
    dispatch = WorkflowStepHistory.objects.get(step__run_id=run_id, step__step_key="q").dispatch
    assert dispatch == StepDispatch.IN_PLACE
    assert queued_tasks() == []


def test_gather__in_an_inline_run_every_member_runs_in_the_caller(passes):
    assert pw.run_to_completion("g.pair") == [2, 4, 103]
    assert pw.run_to_completion("g.branches") == [4, 105, 14]


def test_gather__status_of_each_member_row(passes):
    run_id = start("g.pair")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="a")
    history = WorkflowStepHistory.objects.get(step=step)
    assert (step.status, history.status, history.dispatch) == (
        StepStatus.SCHEDULED,
        StepStatus.SCHEDULED,
        StepDispatch.QUEUED,
    )
    assert history.scheduled_at == history.created_at == step.created_at


def test_replay_check__reads_a_gather_without_running_or_writing_anything(passes):
    from pikku_workflows.engine.operations.replay_check import NON_DETERMINISTIC, OK, check_run

    run_id = start("g.branches")  # parked: l1 and c on workers, r1 done
    before = list(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    assert check_run(run_of(run_id)).verdict == OK
    assert (
        list(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status")) == before
    )

    def changed(wf: pw.Workflow, input: dict) -> list:  # the call member now asks for g.local
        return wf.gather(lambda: wf.do("l1", "g.double", 1), lambda: 0, wf.call("c", "g.local", 7))

    del registry.workflows["g.branches"]  # a deploy of new code
    pw.workflow("g.branches")(changed)

    verdict = check_run(run_of(run_id))
    assert (verdict.verdict, verdict.step_key) == (NON_DETERMINISTIC, "c")
