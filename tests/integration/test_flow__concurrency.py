"""A workflow's concurrency rule: runs with the same key beyond `max_active` wait `queued` (or
are skipped, or replace the oldest), and the transaction that ends a holder admits the next."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun, WorkflowSlot
from pikku_workflows.status import RunStatus
from pikku_workflows.tasks import orchestrate
from tests.queue import drain_queue, queued_tasks
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ORCHESTRATE = "pikku_workflows.tasks.orchestrate"
SLOT_COUNT = '"pikku_workflows_workflowslotcount"'


def _register(name: str, **rule) -> None:
    @pw.workflow(name, concurrency=pw.Concurrency(key=lambda input: input["tenant"], **rule))
    def body(wf, input):
        return input


def _statuses(*run_ids: str) -> list[str]:
    return [load_run(run_id).status for run_id in run_ids]


def test_concurrency__a_start_past_max_active_waits_queued_and_other_keys_run():
    _register("flow.sync", max_active=1)

    first = pw.start_workflow("flow.sync", {"tenant": "a", "n": 1})
    second = pw.start_workflow("flow.sync", {"tenant": "a", "n": 2})
    other = pw.start_workflow("flow.sync", {"tenant": "b", "n": 3})

    assert _statuses(first, second, other) == [
        RunStatus.RUNNING,
        RunStatus.QUEUED,
        RunStatus.RUNNING,
    ]
    assert load_run(second).concurrency_key == "a"
    assert [args for _, args in queued_tasks()] == [(first,), (other,)]
    assert set(WorkflowSlot.objects.values_list("run_id", flat=True)) == {
        WorkflowRun.objects.get(pk=first).pk,
        WorkflowRun.objects.get(pk=other).pk,
    }


def test_concurrency__the_pass_that_ends_the_holder_admits_the_next_and_prompts_it():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a", "n": 1})
    second = pw.start_workflow("flow.sync", {"tenant": "a", "n": 2})

    orchestrate(first)

    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.RUNNING]
    # The list's column says what the admitted run waits on now: its first pass.
    assert load_run(second).waiting_on == "pass"
    assert (second,) in [args for _, args in queued_tasks()]
    assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [load_run(second).pk]
    drain_queue()
    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert not WorkflowSlot.objects.exists()


def test_concurrency__admission_waits_for_the_holder_to_end_not_to_park():
    @pw.workflow("flow.mutex", concurrency=pw.Concurrency(key="one", max_active=1))
    def mutex(wf, input):
        return wf.wait_for_signal("go", "go")

    first = pw.start_workflow("flow.mutex", {})
    second = pw.start_workflow("flow.mutex", {})
    drain_queue()

    assert _statuses(first, second) == [RunStatus.RUNNING, RunStatus.QUEUED]
    pw.send_signal(first, "go", 1)
    drain_queue()
    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.RUNNING]


def test_concurrency__skip_records_the_new_run_cancelled_and_audits_it():
    _register("flow.skip", max_active=1, on_full="skip")
    first = pw.start_workflow("flow.skip", {"tenant": "a"})

    skipped = pw.start_workflow("flow.skip", {"tenant": "a"})

    run = load_run(skipped)
    assert (run.status, run.error["code"]) == (RunStatus.CANCELLED, "CONCURRENCY_SKIPPED")
    assert run.finished_at is not None
    audit = WorkflowAuditEntry.objects.get(run_id=skipped)
    assert audit.action == "cancel"
    assert audit.payload["on_full"] == "skip"
    assert audit.payload["held_by"] == [first]
    assert [args for _, args in queued_tasks()] == [(first,)]


def test_concurrency__replace_cancels_the_oldest_active_run_and_admits_the_new_one():
    _register("flow.replace", max_active=1, on_full="replace")
    first = pw.start_workflow("flow.replace", {"tenant": "a", "n": 1})

    second = pw.start_workflow("flow.replace", {"tenant": "a", "n": 2})

    replaced = load_run(first)
    assert (replaced.status, replaced.error["code"]) == (
        RunStatus.CANCELLED,
        "CONCURRENCY_REPLACED",
    )
    assert load_run(second).status == RunStatus.RUNNING
    audit = WorkflowAuditEntry.objects.get(run_id=first)
    assert (audit.action, audit.payload["replaced_by"]) == ("cancel", second)
    assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [load_run(second).pk]
    drain_queue()
    assert _statuses(first, second) == [RunStatus.CANCELLED, RunStatus.COMPLETED]


def test_concurrency__a_queued_run_can_be_cancelled_and_holds_no_slot():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a"})
    second = pw.start_workflow("flow.sync", {"tenant": "a"})

    pw.cancel_run(second, reason="not needed")

    assert _statuses(first, second) == [RunStatus.RUNNING, RunStatus.CANCELLED]
    assert WorkflowSlot.objects.count() == 1
    drain_queue()
    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.CANCELLED]


def test_concurrency__a_queued_run_suspended_resumes_into_the_queue_then_is_admitted():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a"})
    second = pw.start_workflow("flow.sync", {"tenant": "a"})

    pw.suspend_run(second)
    assert load_run(second).status == RunStatus.SUSPENDED
    pw.resume_run(second)
    assert load_run(second).status == RunStatus.QUEUED

    pw.suspend_run(second)
    drain_queue()  # first ends: its slot is free, but a suspended run is not admitted
    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.SUSPENDED]
    pw.resume_run(second)
    assert load_run(second).status == RunStatus.RUNNING
    drain_queue()
    assert load_run(second).status == RunStatus.COMPLETED


def test_concurrency__a_suspended_holder_keeps_its_slot_until_it_ends():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a"})
    second = pw.start_workflow("flow.sync", {"tenant": "a"})

    pw.suspend_run(first)
    assert _statuses(first, second) == [RunStatus.SUSPENDED, RunStatus.QUEUED]
    pw.resume_run(first)
    assert load_run(first).status == RunStatus.RUNNING
    pw.cancel_run(first)
    assert load_run(second).status == RunStatus.RUNNING


def test_concurrency__a_start_with_a_rule_costs_one_statement_more_than_without():
    @pw.workflow("flow.free")
    def free(wf, input):
        return input

    _register("flow.ruled", max_active=2)

    with CaptureQueriesContext(connection) as plain:
        pw.start_workflow("flow.free", {"tenant": "a"})
    with CaptureQueriesContext(connection) as ruled:
        pw.start_workflow("flow.ruled", {"tenant": "a"})

    assert len(ruled) <= len(plain) + 1, [q["sql"][:80] for q in ruled]


def test_concurrency__the_pass_that_ends_a_run_with_a_rule_costs_three_statements_more():
    # Its key's count row locked (before the run row), its slot freed and uncounted, the runs
    # queued on the key admitted into the room: the key is locked once, not again to admit.
    @pw.workflow("flow.free")
    def free(wf, input):
        return input

    _register("flow.ruled", max_active=2)
    plain_run = pw.start_workflow("flow.free", {"tenant": "a"})
    ruled_run = pw.start_workflow("flow.ruled", {"tenant": "a"})

    with CaptureQueriesContext(connection) as plain:
        orchestrate(plain_run)
    with CaptureQueriesContext(connection) as ruled:
        orchestrate(ruled_run)

    assert _statuses(plain_run, ruled_run) == [RunStatus.COMPLETED] * 2
    assert len(ruled) == len(plain) + 3, [q["sql"][:80] for q in ruled]
    locks = [q for q in ruled if q["sql"].startswith(f"INSERT INTO {SLOT_COUNT}")]
    assert len(locks) == 1, [q["sql"][:80] for q in locks]


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (lambda input: input["missing"], "raised KeyError"),
        (lambda input: 42, "must be a string"),
        (lambda input: "", "must not be empty"),
    ],
)
def test_concurrency__a_key_function_that_fails_is_invalid_input_and_writes_nothing(key, problem):
    @pw.workflow("flow.badkey", concurrency=pw.Concurrency(key=key))
    def badkey(wf, input):
        return input

    with pytest.raises(pw.InvalidInput, match=problem):
        pw.start_workflow("flow.badkey", {"tenant": "a"})

    assert not WorkflowRun.objects.exists()


def test_recover__admits_a_queued_run_whose_key_has_room_and_frees_slots_of_ended_runs():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a"})
    second = pw.start_workflow("flow.sync", {"tenant": "a"})
    # The holder ends without freeing its slot (a rule added after it started, say).
    WorkflowRun.objects.filter(pk=first).update(status=RunStatus.COMPLETED)

    counts = pw.recover()

    assert counts["admitted"] == 1
    assert _statuses(first, second) == [RunStatus.COMPLETED, RunStatus.RUNNING]
    assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [load_run(second).pk]


def test_waiting_on__a_queued_run_waits_on_admission_naming_its_key_and_holders():
    _register("flow.sync", max_active=1)
    first = pw.start_workflow("flow.sync", {"tenant": "a"})
    second = pw.start_workflow("flow.sync", {"tenant": "a"})

    summary = pw.get_run_status(second)

    assert summary["status"] == RunStatus.QUEUED
    assert summary["waiting_on"] == {
        "kind": "admission",
        "reason": "concurrency",
        "key": "a",
        "held_by": [first],
    }
    assert list(WorkflowRun.objects.waiting_on("admission").values_list("pk", flat=True)) == [
        load_run(second).pk
    ]


def test_priority__a_queued_run_with_priority_is_admitted_before_older_runs_of_its_key():
    @pw.workflow(
        "flow.plans",
        concurrency=pw.Concurrency(key="one"),
        priority=lambda input: 60 if input["plan"] == "pro" else 0,
    )
    def plans(wf, input):
        return input

    holder = pw.start_workflow("flow.plans", {"plan": "free"})
    free = pw.start_workflow("flow.plans", {"plan": "free"})
    pro = pw.start_workflow("flow.plans", {"plan": "pro"})

    pw.cancel_run(holder)

    assert load_run(pro).priority == 60
    assert _statuses(free, pro) == [RunStatus.QUEUED, RunStatus.RUNNING]
