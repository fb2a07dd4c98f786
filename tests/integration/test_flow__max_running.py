"""A named limit's `max_running`: a slot per executing step attempt. An attempt that finds the
limit full waits pending with no timer; the attempt whose code returns frees its slot in the
transaction that hands it to the oldest waiting attempt and dispatches it."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.limits import update_limit
from pikku_workflows.engine.operations.step_execution import execute_queued_step
from pikku_workflows.models import WorkflowSlot, WorkflowSlotCount
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.tasks import orchestrate
from tests.queue import drain_queue, queued_tasks
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXECUTE_STEP = "pikku_workflows.tasks.execute_step"


def _workflow_calling(name: str, function: str) -> None:
    @pw.workflow(name)
    def body(wf, input):
        return wf.do("call", function, input, retries=0)


def test_max_running__an_attempt_over_it_waits_and_the_freed_slot_admits_it_with_a_message(
    settings,
):
    # Each pass hands its step to the queue (not in place), so a worker claims each.
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pw.define_limit("slots.vendor", max_running=1)
    seen: dict[str, object] = {}

    @pw.step_function("slots.call", inline=False, limits=["slots.vendor"])
    def call(data, ctx):
        if data["n"] == 1:
            # While this attempt holds the only slot, a worker claims the other run's step.
            execute_queued_step(data["other"], "call")
            seen["waiting"] = load_step(data["other"], "call").status
            seen["waiting_on"] = pw.get_run_status(data["other"])["waiting_on"]
            seen["slots"] = list(WorkflowSlot.objects.values_list("step__run_id", flat=True))
        return data["n"]

    _workflow_calling("slots.sync", "slots.call")
    second = pw.start_workflow("slots.sync", {"n": 2})
    first = pw.start_workflow("slots.sync", {"n": 1, "other": second})
    orchestrate(second)
    orchestrate(first)
    messages_before = len(queued_tasks())

    execute_queued_step(first, "call")

    assert seen["waiting"] == StepStatus.PENDING
    assert seen["waiting_on"] == {
        "step_key": "call",
        "kind": "admission",
        "reason": "concurrency",
        "limit": "slots.vendor",
        "key": "",
    }
    assert [str(run_id) for run_id in seen["slots"]] == [first]
    # The end of the first attempt handed its slot to the waiting step and sent it a message
    # (beside the two the passes sent): it did not wait for a timer or a poll.
    handed = WorkflowSlot.objects.get()
    assert str(handed.step.run_id) == second
    assert (EXECUTE_STEP, (second, "call")) in queued_tasks()[messages_before - 2 :]

    drain_queue()

    assert [load_run(first).status, load_run(second).status] == [RunStatus.COMPLETED] * 2
    assert not WorkflowSlot.objects.exists()
    assert WorkflowSlotCount.objects.get(rule="limit:slots.vendor").held == 0


def test_max_running__a_failed_attempt_frees_its_slot_too():
    pw.define_limit("slots.vendor", max_running=1)

    @pw.step_function("slots.fail", inline=False, limits=["slots.vendor"])
    def fail(data, ctx):
        raise RuntimeError("upstream down")

    _workflow_calling("slots.sync", "slots.fail")
    run_id = pw.start_workflow("slots.sync", {})
    drain_queue()

    assert load_run(run_id).status == RunStatus.FAILED
    assert not WorkflowSlot.objects.exists()
    assert WorkflowSlotCount.objects.get(rule="limit:slots.vendor").held == 0


def test_max_running__an_in_process_step_holds_a_slot_while_it_runs():
    pw.define_limit("slots.local", max_running=1)
    held = []

    @pw.step_function("slots.local_call", limits=["slots.local"])
    def local_call(data, ctx):
        held.append(WorkflowSlot.objects.filter(rule="limit:slots.local").count())
        return data

    _workflow_calling("slots.sync", "slots.local_call")
    run_id = pw.start_workflow("slots.sync", {"n": 1}, inline=True)

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert held == [1]
    assert not WorkflowSlot.objects.exists()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_running": 0}, "max_running"),
        ({"max_running": -1}, "max_running"),
        ({"max_running": 1.5}, "max_running"),
        ({"max_running": True}, "max_running"),
        ({"max_running": 2, "burst": -1}, "burst"),
        ({"rate": "10/x"}, "rate"),
        ({}, "needs a rate, a max_running"),
    ],
)
def test_define_limit__bad_input_is_invalid_input_naming_the_problem(options, problem):
    with pytest.raises(pw.InvalidInput, match=problem):
        pw.define_limit("slots.bad", **options)


@pytest.mark.parametrize("inline", [True, False])
def test_max_running__an_async_attempt_holds_its_slot_while_it_awaits_and_frees_it(inline):
    pw.define_limit("slots.async_vendor", max_running=1)
    seen: list[int] = []

    async def held_slots() -> int:
        return await WorkflowSlot.objects.filter(rule="limit:slots.async_vendor").acount()

    @pw.step_function("slots.async_call", inline=inline, limits=["slots.async_vendor"])
    async def call(data, ctx):
        seen.append(await held_slots())
        return data["n"]

    _workflow_calling("slots.async", "slots.async_call")
    run_id = pw.start_workflow("slots.async", {"n": 1})
    drain_queue()

    assert load_run(run_id).status == RunStatus.COMPLETED
    assert seen == [1]
    assert not WorkflowSlot.objects.exists()
    assert WorkflowSlotCount.objects.get(rule="limit:slots.async_vendor").held == 0


def _roles_calling(name: str, function: str, roles) -> None:
    """A step function whose attempts act by their data's role, and a workflow calling it."""
    pw.step_function(function, inline=False, limits=["slots.vendor"])(
        lambda data, ctx: roles[data["role"]](data)
    )
    _workflow_calling(name, function)


def _slot_runs() -> list[str]:
    return sorted(str(run_id) for run_id in WorkflowSlot.objects.values_list("run_id", flat=True))


def test_max_running__raised_at_run_time_hands_its_new_slots_to_the_waiting_attempts_at_once(
    settings,
):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pw.define_limit("slots.vendor", max_running=1)
    seen: dict[str, object] = {}

    def holder(data):
        for other in data["others"]:
            execute_queued_step(other, "call")  # the only slot is this attempt's: they wait
        seen["waiting_before"] = [load_step(o, "call").admission_hold for o in data["others"]]
        messages_before = len(queued_tasks())
        update_limit("slots.vendor", max_running=3)
        seen["slots"] = _slot_runs()
        seen["waiting_after"] = [load_step(o, "call").admission_hold for o in data["others"]]
        seen["messages"] = queued_tasks()[messages_before:]
        return "held"

    _roles_calling("slots.sync", "slots.roles", {"holder": holder, "waiter": lambda data: "ran"})
    others = [pw.start_workflow("slots.sync", {"role": "waiter"}) for _ in range(2)]
    first = pw.start_workflow("slots.sync", {"role": "holder", "others": others})
    for run_id in [*others, first]:
        orchestrate(run_id)

    execute_queued_step(first, "call")

    assert all(hold and hold["limit"] == "slots.vendor" for hold in seen["waiting_before"])
    # The edit's own transaction gave both waiting steps a slot and their messages.
    assert seen["slots"] == sorted([first, *others])
    assert seen["waiting_after"] == [None, None]
    assert sorted(seen["messages"]) == sorted((EXECUTE_STEP, (o, "call")) for o in others)
    drain_queue()
    assert {load_run(r).status for r in [first, *others]} == {RunStatus.COMPLETED}
    assert WorkflowSlotCount.objects.get(rule="limit:slots.vendor").held == 0


def test_max_running__lowered_at_run_time_lets_its_holders_finish_and_admits_no_one_until_below(
    settings,
):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pw.define_limit("slots.vendor", max_running=2)
    seen: dict[str, object] = {}

    def first_holder(data):
        execute_queued_step(data["second"], "call")  # the second slot: it runs inside this
        # The second holder ended: one slot held, the new bound is 1, so no one is admitted.
        seen["after_second"] = (_slot_runs(), load_step(data["waiter"], "call").admission_hold)
        return "first"

    def second_holder(data):
        update_limit("slots.vendor", max_running=1)
        execute_queued_step(data["waiter"], "call")  # 2 held, bound 1: it waits
        seen["after_lowering"] = (_slot_runs(), load_step(data["waiter"], "call").status)
        return "second"

    roles = {"first": first_holder, "second": second_holder, "waiter": lambda data: "ran"}
    _roles_calling("slots.sync", "slots.roles", roles)
    waiter = pw.start_workflow("slots.sync", {"role": "waiter"})
    second = pw.start_workflow("slots.sync", {"role": "second", "waiter": waiter})
    first = pw.start_workflow("slots.sync", {"role": "first", "second": second, "waiter": waiter})
    for run_id in (waiter, second, first):
        orchestrate(run_id)

    execute_queued_step(first, "call")

    # Lowering evicted no one: both holders kept their slots and the waiter waited.
    assert seen["after_lowering"] == (sorted([first, second]), StepStatus.PENDING)
    slots, hold = seen["after_second"]
    assert slots == [first]
    assert hold["limit"] == "slots.vendor"
    # The first holder's end brought usage below the bound: the waiter holds the slot now.
    assert _slot_runs() == [waiter]
    drain_queue()
    assert load_run(waiter).status == RunStatus.COMPLETED
