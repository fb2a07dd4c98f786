"""Admission under a concurrency rule, raced by threads with their own connections: starts of
one key never over-admit, and an end racing a replace or a cancel racing an admission each end
one way."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowSlot, WorkflowSlotCount
from pikku_workflows.status import RunStatus
from pikku_workflows.tasks import orchestrate
from tests.concurrency.harness import race
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STARTS = 25
ROUNDS = 3


def _register(name: str, **rule) -> None:
    @pw.workflow(name, concurrency=pw.Concurrency(key=lambda input: input["tenant"], **rule))
    def body(wf, input):
        return input


def _slots_agree_with_runs(rule: str, key: str) -> int:
    """The key's count row, its slot rows and its running runs all say the same number."""
    held = WorkflowSlotCount.objects.get(rule=rule, key=key).held
    slots = WorkflowSlot.objects.filter(rule=rule, key=key).count()
    assert held == slots
    return held


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_admission__25_concurrent_starts_with_max_active_2_admit_exactly_2(round_number):
    _register("race.sync", max_active=2)

    outcomes = race(
        [lambda _: pw.start_workflow("race.sync", {"tenant": "a"})] * STARTS,
    )

    assert all(isinstance(outcome, str) for outcome in outcomes), outcomes
    runs = WorkflowRun.objects.filter(workflow="race.sync")
    assert runs.filter(status=RunStatus.RUNNING).count() == 2
    assert runs.filter(status=RunStatus.QUEUED).count() == STARTS - 2
    assert _slots_agree_with_runs("workflow:race.sync", "a") == 2


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_admission__replace_racing_the_holder_s_completion_ends_one_way(round_number):
    _register("race.replace", max_active=1, on_full="replace")
    holder = pw.start_workflow("race.replace", {"tenant": "a", "n": 1})

    complete, replace = race(
        [
            lambda _: orchestrate(holder),
            lambda _: pw.start_workflow("race.replace", {"tenant": "a", "n": 2}),
        ]
    )

    assert complete is None, complete
    successor = load_run(replace)
    ended = load_run(holder)
    assert successor.status == RunStatus.RUNNING
    # Either the holder completed first (the successor took the free slot) or the successor
    # replaced it (cancelled, CONCURRENCY_REPLACED): never both running, never both ended.
    if ended.status == RunStatus.CANCELLED:
        assert ended.error["code"] == "CONCURRENCY_REPLACED"
    else:
        assert (ended.status, ended.error) == (RunStatus.COMPLETED, None)
    assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [successor.pk]
    assert _slots_agree_with_runs("workflow:race.replace", "a") == 1


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_admission__a_queued_run_cancelled_while_being_admitted_ends_one_way(round_number):
    _register("race.sync", max_active=1)
    holder = pw.start_workflow("race.sync", {"tenant": "a"})
    queued = pw.start_workflow("race.sync", {"tenant": "a"})

    def end_holder(_):
        orchestrate(holder)

    def cancel(_):
        return pw.cancel_run(queued, reason="changed my mind")["status"]

    ended, cancelled = race([end_holder, cancel])

    assert ended is None, ended
    assert cancelled == RunStatus.CANCELLED, cancelled
    assert load_run(holder).status == RunStatus.COMPLETED
    assert load_run(queued).status == RunStatus.CANCELLED
    # Cancelled before admission (it never took the slot) or after (its end freed it): no
    # slot is left behind either way.
    assert not WorkflowSlot.objects.exists()
    assert _slots_agree_with_runs("workflow:race.sync", "a") == 0


def test_admission__a_start_waits_for_a_transaction_that_holds_the_key_then_counts_its_slot():
    _register("race.sync", max_active=1)
    holding, release = threading.Event(), threading.Event()

    def hold_key():
        try:
            with transaction.atomic():
                pw.start_workflow("race.sync", {"tenant": "a"})
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    other = threading.Thread(target=hold_key, daemon=True)
    other.start()
    assert holding.wait(10)
    started: list[str] = []

    def start_second():
        try:
            started.append(pw.start_workflow("race.sync", {"tenant": "a"}))
        finally:
            connection.close()

    second = threading.Thread(target=start_second, daemon=True)
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second start waited for the key's count row"
    release.set()
    other.join(10)
    second.join(10)
    assert load_run(started[0]).status == RunStatus.QUEUED


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_rate__concurrent_starts_each_get_their_own_gcra_time_one_interval_apart(round_number):
    pw.define_limit("race.rate", rate="10/s")

    @pw.workflow("race.rated", limits=["race.rate"])
    def rated(wf, input):
        return input

    outcomes = race([lambda _: pw.start_workflow("race.rated", {})] * 12)

    assert all(isinstance(outcome, str) for outcome in outcomes), outcomes
    times = sorted(
        WorkflowRun.objects.filter(workflow="race.rated").values_list("not_before", flat=True)
    )
    gaps = {later - earlier for earlier, later in itertools.pairwise(times[1:])}
    assert gaps == {timedelta(milliseconds=100)}
