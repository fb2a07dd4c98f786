"""wf.now(), wf.random(), wf.uuid4() and wf.uuid7() (docs/code-workflows.md, "Determinism"): the
same values on every replay, from the run's stored seed and the tables the pass already read;
not one statement more in a pass."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """Queued steps go through the queue, so a run takes several passes."""


@pytest.fixture(autouse=True)
def steps() -> None:
    @pw.step_function("h.local")
    def local(data: int, ctx: pw.StepContext) -> int:
        return data

    @pw.step_function("h.queued", inline=False)
    def queued_step(data: int, ctx: pw.StepContext) -> int:
        return data


def draws(wf: pw.Workflow) -> list:
    return [wf.random(), str(wf.uuid4()), str(wf.uuid7())]


def start(name: str) -> str:
    run_id = pw.start_workflow(name, {})
    OrmQ.objects.all().delete()
    tasks.orchestrate(run_id)
    return run_id


def finished(run_id: str) -> WorkflowRun:
    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def ended_at(run_id: str, key: str) -> datetime:
    history = WorkflowStepHistory.objects.get(step__run_id=run_id, step__step_key=key)
    return history.succeeded_at


@pytest.mark.postgres
def test_now__the_start_then_each_step_s_end_the_same_in_the_pass_that_ran_it_and_after():
    @pw.workflow("h.clock")
    def clock(wf: pw.Workflow, input: dict) -> dict:
        at_start = wf.now()
        wf.do("a", "h.local", 1)  # in the pass: its success is written with the next step
        after_a = wf.now()
        # Recorded in the first pass (the value that pass saw), replayed from then on.
        seen_first = wf.do("seen", lambda: after_a.isoformat())
        wf.do("q", "h.queued", 2)  # parks: the next pass replays all of the above
        return {
            "start": at_start.isoformat(),
            "after_a": after_a.isoformat(),
            "seen_first": seen_first,
            "after_q": wf.now().isoformat(),
        }

    run_id = start("h.clock")
    run = finished(run_id)
    assert run.output["start"] == run.created_at.isoformat()
    assert run.output["after_a"] == run.output["seen_first"] == ended_at(run_id, "a").isoformat()
    assert run.output["after_q"] == ended_at(run_id, "q").isoformat()
    assert run.output["start"] < run.output["after_a"] < run.output["after_q"]


def test_random__the_same_draws_on_every_replay_and_other_draws_in_another_run():
    @pw.workflow("h.dice")
    def dice(wf: pw.Workflow, input: dict) -> dict:
        before = draws(wf)
        recorded = wf.do("before", lambda: before)  # as the first pass drew them
        wf.do("q", "h.queued", 1)
        return {"before": before, "recorded": recorded, "after": draws(wf)}

    one, two = finished(start("h.dice")), finished(start("h.dice"))
    assert one.output["before"] == one.output["recorded"]
    assert one.output["after"] != one.output["before"]  # the next position draws anew
    assert two.output["before"] != one.output["before"]  # another run, another seed
    value, four, seven = one.output["before"]
    assert 0 <= value < 1
    assert uuid.UUID(four).version == 4
    assert uuid.UUID(seven).version == 7


def test_uuid7__is_ordered_by_wf_now():
    @pw.workflow("h.seven")
    def seven(wf: pw.Workflow, input: dict) -> dict:
        first = wf.uuid7()
        wf.do("q", "h.queued", 1)
        return {"first": str(first), "second": str(wf.uuid7()), "now": wf.now().timestamp()}

    run = finished(start("h.seven"))
    first, second = uuid.UUID(run.output["first"]), uuid.UUID(run.output["second"])
    assert first.int >> 80 == int(run.created_at.timestamp() * 1000)
    assert second.int >> 80 == int(run.output["now"] * 1000)
    assert first < second


def test_random__a_gather_member_draws_the_same_however_far_the_others_got():
    @pw.workflow("h.members")
    def members(wf: pw.Workflow, input: dict) -> list:
        def slow() -> float:
            wf.do("q", "h.queued", 1)  # waits a pass
            return wf.random()

        def quick() -> list:
            value = wf.random()
            return [value, wf.do("recorded", lambda: value)]  # as drawn in the first pass

        return wf.gather(slow, quick)

    run = finished(start("h.members"))
    slow, (quick, recorded) = run.output
    assert quick == recorded
    assert slow != quick


def test_helpers__outside_a_body_are_refused():
    kept: list[pw.Workflow] = []

    @pw.workflow("h.kept")
    def keep(wf: pw.Workflow, input: dict) -> None:
        kept.append(wf)

    pw.run_to_completion("h.kept")
    for helper in ("now", "random", "uuid4", "uuid7"):
        with pytest.raises(InvalidInput, match="for a workflow body while its pass runs"):
            getattr(kept[0], helper)()


@pytest.mark.postgres
def test_helpers__add_no_statement_to_a_pass():
    def body(wf: pw.Workflow, input: dict) -> int:
        if input["helpers"]:
            for _ in range(50):
                wf.now(), wf.random(), wf.uuid4(), wf.uuid7()
        wf.do("a", "h.local", 1)
        wf.gather(wf.call("b", "h.local", 2), wf.call("c", "h.local", 3))
        return wf.do("q", "h.queued", 4)

    pw.workflow("h.counted")(body)

    def statements_of_a_pass(helpers: bool) -> list[str]:
        run_id = pw.start_workflow("h.counted", {"helpers": helpers})
        OrmQ.objects.all().delete()
        with CaptureQueriesContext(connection) as queries:
            tasks.orchestrate(run_id)
        assert WorkflowStep.objects.filter(run_id=run_id).count() == 4
        return [query["sql"].split()[0] for query in queries.captured_queries]

    assert statements_of_a_pass(helpers=True) == statements_of_a_pass(helpers=False)


@pytest.mark.postgres
def test_now__after_a_sleep_or_a_signal_is_when_it_ended_on_every_replay():
    @pw.workflow("h.waits")
    def waits(wf: pw.Workflow, input: dict) -> dict:
        wf.sleep("nap", "20ms")  # waited out in the pass that reached it
        after_nap = wf.now()
        seen = wf.do("seen", lambda: after_nap.isoformat())
        wf.wait_for_signal("go", "go")
        after_go = wf.now()
        wf.do("q", "h.queued", 1)
        return {"after_nap": after_nap.isoformat(), "seen": seen, "after_go": after_go.isoformat()}

    run_id = pw.start_workflow("h.waits", {}, inline=True)
    pw.send_signal(run_id, "go", {"at": "now"})
    run = finished(run_id)
    assert run.output["after_nap"] == run.output["seen"] == ended_at(run_id, "nap").isoformat()
    assert run.output["after_go"] == ended_at(run_id, "go").isoformat()


@pytest.mark.postgres
def test_now__after_a_signal_kept_before_the_wait_is_when_the_wait_took_it():
    @pw.workflow("h.kept_signal")
    def kept_signal(wf: pw.Workflow, input: dict) -> dict:
        wf.do("first", "h.queued", 0)  # parks: the signal is sent meanwhile, and kept
        wf.wait_for_signal("go", "go")  # takes the kept signal in the pass that reaches it
        after_go = wf.now()
        seen = wf.do("seen", lambda: after_go.isoformat())
        wf.do("q", "h.queued", 1)
        return {"after_go": after_go.isoformat(), "seen": seen}

    run_id = start("h.kept_signal")
    pw.send_signal(run_id, "go")
    run = finished(run_id)
    assert run.output["after_go"] == run.output["seen"] == ended_at(run_id, "go").isoformat()
