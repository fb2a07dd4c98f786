"""Debounce windows raced by threads with their own connections: concurrent starts of one key
join exactly one queued run, and a start racing the timer loop's admission of that run either
joins it before it is admitted or opens the next window."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.store.admission_transitions import admit_due
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.concurrency.harness import race
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STARTS = 25
ROUNDS = 3


def _register(name: str, quiet: str) -> None:
    @pw.workflow(name, debounce=pw.Debounce(key=lambda input: input["shop"], quiet=quiet))
    def body(wf, input):
        return input


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_debounce__25_concurrent_starts_of_one_key_collapse_into_exactly_one_run(round_number):
    _register("race.hooks", quiet="1h")

    outcomes = race(
        [
            lambda _, n=n: pw.start_workflow("race.hooks", {"shop": "a", "n": n})
            for n in range(STARTS)
        ]
    )

    assert all(isinstance(outcome, str) for outcome in outcomes), outcomes
    assert len(set(outcomes)) == 1
    run = WorkflowRun.objects.get()
    assert run.status == RunStatus.QUEUED
    # The input is one of the starts' (whichever joined last), whole.
    assert run.input in [{"shop": "a", "n": n} for n in range(STARTS)]
    assert WorkflowAuditEntry.objects.filter(action="debounced").count() == STARTS - 1


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_debounce__a_start_racing_the_admission_of_its_window_joins_it_or_opens_the_next(
    round_number,
):
    _register("race.hooks", quiet="1ms")
    first = pw.start_workflow("race.hooks", {"shop": "a", "n": 1})

    admitted, started = race(
        [
            lambda _: admit_due(10),
            lambda _: pw.start_workflow("race.hooks", {"shop": "a", "n": 2}),
        ]
    )

    assert isinstance(admitted, int) and isinstance(started, str), (admitted, started)
    admit_due(10)
    runs = {run.pk: run for run in WorkflowRun.objects.all()}
    if started == first:
        # Joined before the admission: one run, with the later input.
        assert list(runs) == [load_run(first).pk]
        assert runs[load_run(first).pk].input == {"shop": "a", "n": 2}
    else:
        # Admitted first: the start opened a window of its own; the first kept its input.
        assert len(runs) == 2
        assert load_run(first).input == {"shop": "a", "n": 1}
    assert {run.status for run in runs.values()} <= {RunStatus.RUNNING, RunStatus.QUEUED}
    assert WorkflowRun.objects.filter(status=RunStatus.QUEUED, debounce_key="a").count() <= 1
