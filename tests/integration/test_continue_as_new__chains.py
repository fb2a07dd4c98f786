"""`wf.continue_as_new`: a run ends `continued` and its successor goes on from a fresh history
with the same workflow, starter and subject; `run_to_completion` follows the chain; signals no
wait took, and signals sent to a continued run, reach the latest run once; input that is not
JSON is refused with nothing written; lists show the latest run of each chain when asked."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowSignal, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.admin_support import CHANGELIST, change_url, listed_ids
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


@pytest.fixture
def two_chains_and_a_plain_run(counter) -> tuple[set[str], set[str]]:
    """Every run, and the latest of each chain: two chains of three links and a run of one."""
    firsts = [pw.start_workflow(counter, {"total": 0, "end": end}, inline=True) for end in (7, 8)]
    firsts.append(pw.start_workflow(counter, {"total": 0, "end": 2}, inline=True))
    chains = [chain_from(WorkflowRun.objects.get(pk=first)) for first in firsts]
    assert [len(chain) for chain in chains] == [3, 3, 1]
    every = {str(run.pk) for chain in chains for run in chain}
    return every, {str(chain[-1].pk) for chain in chains}


def test_run_list__latest_only_shows_the_last_run_of_each_chain(
    client, admin_user, two_chains_and_a_plain_run
):
    every, latest = two_chains_and_a_plain_run
    client.force_login(admin_user)

    def listed(query: str) -> set[str]:
        response = client.get(f"/api/workflows/runs/?page_size=50{query}")
        assert response.status_code == 200, response.content
        return {run["id"] for run in response.json()["results"]}

    assert listed("&latest_only=true") == latest
    assert listed("&latest_only=false") == listed("") == every
    assert listed("&latest_only=true&ordering=created_at") == latest
    assert client.get("/api/workflows/runs/?latest_only=maybe").status_code == 400


def test_admin_list__the_chains_filter_shows_the_last_run_of_each(
    admin_client, two_chains_and_a_plain_run
):
    every, latest = two_chains_and_a_plain_run

    shown = listed_ids(admin_client.get(CHANGELIST, {"latest_only": "1"}))

    assert {str(pk) for pk in shown} == latest
    assert {str(pk) for pk in listed_ids(admin_client.get(CHANGELIST))} == every
    assert "Latest run of each" in admin_client.get(CHANGELIST).content.decode()


def test_run_list__latest_only_pages_on_an_index_of_its_own(two_chains_and_a_plain_run):
    page = WorkflowRun.objects.latest_of_chains().order_by("-created_at", "-id")[:50]
    sql, params = page.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        # A handful of rows: a sequential scan would be cheaper, so rule it out to see whether
        # the index serves this query at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "pikku_run_latest_created" in plan
