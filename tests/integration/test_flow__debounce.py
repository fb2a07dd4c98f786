"""A workflow's debounce rule: starts with the same key within `quiet` of each other collapse
into one queued run (the latest input wins), admitted by the timer loop once `quiet` passes
without a new start, and at the latest `max_wait` after the first; times on the database
clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.models import WorkflowAuditEntry, WorkflowEvent, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 40


def _register(name: str = "hooks.sync", **rule) -> None:
    rule = {"key": lambda input: f"shop:{input['shop']}", "quiet": "1h", **rule}

    @pw.workflow(name, debounce=pw.Debounce(**rule))
    def body(wf, input):
        return input


def _database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT CURRENT_TIMESTAMP")
        return cursor.fetchone()[0]


def test_debounce__a_burst_of_40_starts_collapses_into_one_queued_run_with_the_last_input():
    _register()

    run_ids = {pw.start_workflow("hooks.sync", {"shop": 1, "n": n}) for n in range(BURST)}
    other = pw.start_workflow("hooks.sync", {"shop": 2, "n": 0})

    assert len(run_ids) == 1
    (run_id,) = run_ids
    assert other != run_id
    run = load_run(run_id)
    assert (run.status, run.input) == (RunStatus.QUEUED, {"shop": 1, "n": BURST - 1})
    assert WorkflowRun.objects.count() == 2
    assert pw.get_run_status(run_id)["waiting_on"] == {
        "kind": "admission",
        "reason": "debounce",
        "key": "shop:1",
        "until": run.not_before.isoformat(),
    }
    # Every start that joined is audited, and the timeline shows it.
    joins = WorkflowAuditEntry.objects.filter(run_id=run_id, action="debounced")
    assert joins.count() == BURST - 1
    assert WorkflowEvent.objects.filter(run_id=run_id, event="debounced").count() == BURST - 1


@pytest.mark.postgres
def test_debounce__each_start_moves_not_before_quiet_past_itself_on_the_database_clock():
    _register(quiet="10m", max_wait="1h")

    before = _database_now()
    run_id = pw.start_workflow("hooks.sync", {"shop": 1})
    first = load_run(run_id)
    between = _database_now()
    assert pw.start_workflow("hooks.sync", {"shop": 1}) == run_id
    after = _database_now()

    second = load_run(run_id)
    assert before + timedelta(minutes=10) <= first.not_before <= between + timedelta(minutes=10)
    assert between + timedelta(minutes=10) <= second.not_before <= after + timedelta(minutes=10)
    assert before + timedelta(hours=1) <= second.debounce_deadline <= between + timedelta(hours=1)


@pytest.mark.postgres
def test_debounce__max_wait_bounds_not_before_however_many_starts_follow():
    # max_wait equal to quiet: the first start's window is the longest any later start may make.
    _register(quiet="10m", max_wait="10m")
    run_id = pw.start_workflow("hooks.sync", {"shop": 1, "n": 0})
    deadline = load_run(run_id).debounce_deadline

    for n in range(1, BURST):
        assert pw.start_workflow("hooks.sync", {"shop": 1, "n": n}) == run_id

    run = load_run(run_id)
    assert run.not_before <= deadline
    assert run.input == {"shop": 1, "n": BURST - 1}


@pytest.mark.postgres
def test_debounce__under_continuous_starts_the_run_is_admitted_at_max_wait():
    _register(quiet="200ms", max_wait="600ms")
    first = pw.start_workflow("hooks.sync", {"shop": 1, "n": 0})
    starts = iter(range(1, 10_000))

    def admitted_while_starting() -> bool:
        pw.start_workflow("hooks.sync", {"shop": 1, "n": next(starts)})
        fire_due_timers()
        return load_run(first).status == RunStatus.RUNNING

    wait_until(admitted_while_starting, what="the run admitted while starts keep coming")

    run = load_run(first)
    # Each start moved not_before on until the deadline stopped it: admitted at max_wait.
    assert run.not_before == run.debounce_deadline
    assert pw.start_workflow("hooks.sync", {"shop": 1, "n": -1}) != first


@pytest.mark.postgres
def test_debounce__the_timer_loop_admits_the_run_after_quiet_with_the_last_input():
    _register(quiet="100ms")
    run_id = pw.start_workflow("hooks.sync", {"shop": 1, "n": 1})
    assert pw.start_workflow("hooks.sync", {"shop": 1, "n": 2}) == run_id

    wait_until(lambda: fire_due_timers() and load_run(run_id).status == RunStatus.RUNNING)
    drain_queue()

    assert load_run(run_id).output == {"shop": 1, "n": 2}
    assert pw.start_workflow("hooks.sync", {"shop": 1, "n": 3}) != run_id


def test_debounce__a_cancelled_debounced_run_is_never_joined_again():
    _register()
    run_id = pw.start_workflow("hooks.sync", {"shop": 1, "n": 1})

    assert pw.cancel_run(run_id, reason="not needed")["status"] == RunStatus.CANCELLED
    later = pw.start_workflow("hooks.sync", {"shop": 1, "n": 2})

    assert later != run_id
    assert load_run(run_id).input == {"shop": 1, "n": 1}
    assert load_run(later).status == RunStatus.QUEUED


def test_debounce__the_latest_start_s_idempotency_key_names_the_run():
    _register()
    run_id = pw.start_workflow("hooks.sync", {"shop": 1, "n": 1}, idempotency_key="delivery-1")
    assert pw.start_workflow("hooks.sync", {"shop": 1, "n": 2}, idempotency_key="delivery-2") == (
        run_id
    )
    not_before = load_run(run_id).not_before

    # A repeat of the latest start is that start again: same run, its window left as it was.
    again = pw.start_workflow("hooks.sync", {"shop": 1, "n": 2}, idempotency_key="delivery-2")

    run = load_run(run_id)
    assert again == run_id
    assert (run.idempotency_key, run.not_before) == ("delivery-2", not_before)
    assert WorkflowAuditEntry.objects.filter(run_id=run_id, action="debounced").count() == 1
    with pytest.raises(pw.IdempotencyConflict):
        pw.start_workflow("hooks.sync", {"shop": 1, "n": 3}, idempotency_key="delivery-2")


@pytest.mark.postgres
def test_debounce__with_a_concurrency_rule_the_run_waits_for_its_slot_after_its_window():
    @pw.workflow(
        "hooks.mutex",
        concurrency=pw.Concurrency(key=lambda input: input["shop"]),
        debounce=pw.Debounce(key=lambda input: str(input["shop"]), quiet="100ms"),
    )
    def body(wf, input):
        wf.sleep("hold", "1h")

    holder = pw.start_workflow("hooks.mutex", {"shop": "a", "n": 1})
    wait_until(lambda: fire_due_timers() and load_run(holder).status == RunStatus.RUNNING)
    drain_queue()
    waiting = pw.start_workflow("hooks.mutex", {"shop": "a", "n": 2})
    assert waiting != holder

    wait_until(
        lambda: (
            fire_due_timers() is not None
            and pw.get_run_status(waiting)["waiting_on"]["reason"] == "concurrency"
        )
    )

    assert pw.get_run_status(waiting)["waiting_on"]["held_by"] == [holder]
    # Still queued, so still the key's window: a later start joins it.
    assert pw.start_workflow("hooks.mutex", {"shop": "a", "n": 3}) == waiting
    assert load_run(waiting).input == {"shop": "a", "n": 3}


@pytest.mark.postgres
def test_debounce__opening_a_window_costs_one_statement_more_than_a_plain_start_joining_none():
    @pw.workflow("hooks.plain")
    def plain(wf, input):
        return input

    _register()
    with CaptureQueriesContext(connection) as plain_start:
        pw.start_workflow("hooks.plain", {"shop": 1})
    with CaptureQueriesContext(connection) as opening:
        pw.start_workflow("hooks.sync", {"shop": 1})
    with CaptureQueriesContext(connection) as joining:
        pw.start_workflow("hooks.sync", {"shop": 1})

    # The plain start inserts and enqueues its pass; a queued window's run enqueues nothing.
    assert len(opening) <= len(plain_start) + 1, [query["sql"][:60] for query in opening]
    assert len(joining) <= len(plain_start), [query["sql"][:60] for query in joining]


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (lambda input: input["missing"], "debounce key function of 'hooks.bad' raised KeyError"),
        (lambda input: 7, "debounce key of 'hooks.bad' must be a string"),
        (lambda input: "", "debounce key of 'hooks.bad' must not be empty"),
    ],
)
def test_debounce__a_key_function_that_fails_is_invalid_input_and_writes_nothing(key, problem):
    _register("hooks.bad", key=key)

    with pytest.raises(pw.InvalidInput, match=problem):
        pw.start_workflow("hooks.bad", {"shop": 1})

    assert not WorkflowRun.objects.exists()


def test_debounce__a_suspended_debounced_run_resumes_into_its_queue_outside_any_window():
    @pw.workflow(
        "hooks.mutex",
        concurrency=pw.Concurrency(key="all"),
        debounce=pw.Debounce(key="all", quiet="1h"),
    )
    def body(wf, input):
        return input

    suspended = pw.start_workflow("hooks.mutex", {"n": 1})
    pw.suspend_run(suspended, reason="look first")
    window = pw.start_workflow("hooks.mutex", {"n": 2})
    assert window != suspended

    # Two queued runs of one debounce key: the resumed one is no window, so nothing collides.
    assert pw.resume_run(suspended)["status"] == RunStatus.QUEUED
    assert pw.start_workflow("hooks.mutex", {"n": 3}) == window
    assert load_run(suspended).input == {"n": 1}


@pytest.mark.postgres
def test_debounce__only_the_start_that_opens_a_window_takes_its_limits_rate():
    pw.define_limit("hooks.vendor", rate="1/h")

    @pw.workflow(
        "hooks.limited", debounce=pw.Debounce(key="all", quiet="10m"), limits=["hooks.vendor"]
    )
    def limited(wf, input):
        return input

    @pw.workflow("hooks.other", limits=["hooks.vendor"])
    def other(wf, input):
        return input

    run_ids = {pw.start_workflow("hooks.limited", {"n": n}) for n in range(5)}
    later = load_run(pw.start_workflow("hooks.other", {}))

    assert len(run_ids) == 1
    # Five starts, one of them a start to space: the next start of the limit waits one
    # emission interval (an hour), not five.
    waits = later.not_before - later.created_at
    assert timedelta(minutes=59) < waits < timedelta(hours=1, minutes=1)
