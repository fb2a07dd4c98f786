"""`wf.continue_as_new`: a run ends `continued` and its successor goes on from a fresh history
with the same workflow, starter and subject; `run_to_completion` follows the chain; signals no
wait took, and signals sent to a continued run, reach the latest run once; input that is not
JSON is refused with nothing written."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowSignal, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.admin_support import change_url
from tests.integration.test_admin__run_page import text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STEPS_PER_RUN = 3


@pytest.fixture
def counter() -> str:
    """Counts to `end` a step at a time, handing over every STEPS_PER_RUN steps."""

    @pw.workflow("chains.counter")
    def count(wf, input):
        total = input["total"]
        while total < input["end"]:
            total = wf.do("add", lambda total=total: total + 1)
            if wf.history_length >= STEPS_PER_RUN and total < input["end"]:
                wf.continue_as_new({"total": total, "end": input["end"]})
        return {"total": total, "links": input.get("links", 0)}

    return "chains.counter"


def chain_from(first: WorkflowRun) -> list[WorkflowRun]:
    runs, run = [first], first
    while (run := WorkflowRun.objects.filter(continued_from=run).first()) is not None:
        runs.append(run)
    return runs


def test_continue_as_new__a_loop_that_hands_over_every_few_steps_reaches_its_end(counter):
    output = pw.run_to_completion(counter, {"total": 0, "end": 10})

    assert output == {"total": 10, "links": 0}
    chain = chain_from(WorkflowRun.objects.get(continued_from=None))
    assert [run.status for run in chain] == [RunStatus.CONTINUED] * 3 + [RunStatus.COMPLETED]
    assert [run.input["total"] for run in chain[1:]] == [3, 6, 9]
    assert all(WorkflowStep.objects.filter(run=run).count() <= STEPS_PER_RUN for run in chain)
    assert all(run.finished_at is not None and run.lease_holder is None for run in chain)


def test_continue_as_new__the_successor_keeps_starter_subject_and_workflow(
    counter, django_user_model
):
    alice = django_user_model.objects.create_user("alice")
    subject = django_user_model.objects.create_user("the-subject")
    first = pw.start_workflow(
        counter, {"total": 0, "end": 4}, inline=True, started_by=alice, subject=subject
    )

    successor = WorkflowRun.objects.get(continued_from_id=first)
    assert (successor.workflow, successor.started_by, successor.subject) == (
        counter,
        alice,
        subject,
    )
    assert successor.status == RunStatus.COMPLETED
    assert pw.get_run_status(first)["continued_to"] == str(successor.pk)
    assert pw.get_run_status(successor.pk)["continued_from"] == first


@pytest.fixture
def pinger() -> str:
    """The first link hands over at once; its successor takes two `ping` signals."""

    @pw.workflow("chains.pinger")
    def ping(wf, input):
        if input["link"] == 0:
            wf.continue_as_new({"link": 1})
        return [wf.wait_for_signal("a", "ping"), wf.wait_for_signal("b", "ping")]

    return "chains.pinger"


def test_continue_as_new__signals_sent_during_the_hand_over_reach_the_successor_once(pinger):
    first = pw.start_workflow(pinger, {"link": 0})
    pw.send_signal(first, "ping", "kept before the hand-over")
    orchestrate(first)
    successor = WorkflowRun.objects.get(continued_from_id=first)
    assert successor.status == RunStatus.RUNNING  # its first pass has not run yet

    summary = pw.send_signal(first, "ping", "sent to the continued run")
    orchestrate(successor.pk)

    assert summary["id"] == str(successor.pk)
    successor.refresh_from_db()
    assert successor.status == RunStatus.COMPLETED
    assert successor.output == ["kept before the hand-over", "sent to the continued run"]
    signals = WorkflowSignal.objects.order_by("id")
    assert [(s.run_id, s.consumed_by_step.step_key) for s in signals] == [
        (successor.pk, "a"),
        (successor.pk, "b"),
    ]


def test_continue_as_new__input_that_is_not_json_is_refused_and_nothing_is_written():
    @pw.workflow("chains.bad_input")
    def bad(wf, input):
        try:
            wf.continue_as_new({"ratio": float("nan")})
        except pw.InvalidInput as exc:
            return {"refused": exc.code}

    output = pw.run_to_completion("chains.bad_input")

    assert output == {"refused": pw.InvalidInput.code}
    run = WorkflowRun.objects.get()
    assert run.status == RunStatus.COMPLETED
    assert not WorkflowRun.objects.filter(continued_from=run).exists()


def test_continue_as_new__a_continued_run_refuses_nothing_it_cannot_forward(counter):
    first = pw.start_workflow(counter, {"total": 0, "end": 4}, inline=True)

    with pytest.raises(pw.InvalidTransition):
        pw.send_signal(first, "ping")  # the chain's latest run has completed


def test_run_page__links_the_previous_and_next_runs_of_a_chain(admin_client, counter):
    first = pw.start_workflow(counter, {"total": 0, "end": 4}, inline=True)
    successor = WorkflowRun.objects.get(continued_from_id=first)

    first_page = admin_client.get(change_url(first)).content.decode()
    successor_page = admin_client.get(change_url(successor)).content.decode()

    assert f"next {str(successor.pk)[:8]} chains.counter Completed" in text_of(first_page)
    assert f'href="{change_url(successor)}"' in first_page
    assert f"previous {first[:8]} chains.counter Continued" in text_of(successor_page)
    assert f'href="{change_url(first)}"' in successor_page
