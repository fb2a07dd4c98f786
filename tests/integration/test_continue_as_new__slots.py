"""A run under a concurrency rule that continues as new hands its slot to its successor in the
same transaction: a run queued on the key is never admitted in between, and the chain holds
one slot until its last run ends. The successor keeps its schedule too."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowSlot, WorkflowSlotCount
from pikku_workflows.status import RunStatus
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LINKS = 3


@pytest.fixture
def tenant_sync() -> str:
    """One run per tenant at a time; a run hands over until its LINKS-th link, which waits for
    a `go` signal."""

    @pw.workflow(
        "slots.tenant_sync",
        concurrency=pw.Concurrency(key=lambda input: input["tenant"], max_active=1),
    )
    def tenant_sync(wf, input):
        if input["link"] < LINKS:
            wf.continue_as_new({**input, "link": input["link"] + 1})
        return wf.wait_for_signal("go", "go")

    return "slots.tenant_sync"


def latest_of(run_id: str) -> WorkflowRun:
    run = WorkflowRun.objects.get(pk=run_id)
    while (successor := WorkflowRun.objects.filter(continued_from=run).first()) is not None:
        run = successor
    return run


def test_continue_as_new__the_successor_takes_the_slot_and_a_queued_run_stays_queued(
    tenant_sync,
):
    first = pw.start_workflow(tenant_sync, {"tenant": "a", "link": 1})
    waiting = pw.start_workflow(tenant_sync, {"tenant": "a", "link": LINKS})

    for link in range(1, LINKS):
        orchestrate(latest_of(first).pk)
        successor = latest_of(first)
        assert successor.input["link"] == link + 1
        assert successor.status == RunStatus.RUNNING
        assert successor.concurrency_key == "a"
        assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.QUEUED
        assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [successor.pk]
        assert WorkflowSlotCount.objects.get(key="a").held == 1

    drain_queue()
    assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.QUEUED
    pw.send_signal(latest_of(first).pk, "go", "done")
    drain_queue()

    assert latest_of(first).status == RunStatus.COMPLETED
    assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.RUNNING
    assert list(WorkflowSlot.objects.values_list("run_id", flat=True)) == [
        WorkflowRun.objects.get(pk=waiting).pk
    ]


def test_continue_as_new__a_recovery_sweep_between_links_admits_nothing(tenant_sync):
    first = pw.start_workflow(tenant_sync, {"tenant": "a", "link": 1})
    waiting = pw.start_workflow(tenant_sync, {"tenant": "a", "link": LINKS})

    orchestrate(first)
    pw.recover()

    assert WorkflowRun.objects.get(pk=waiting).status == RunStatus.QUEUED
    assert WorkflowSlotCount.objects.get(key="a").held == 1


def test_continue_as_new__the_successor_keeps_its_schedule_and_still_holds_overlap(tenant_sync):
    pw.create_schedule("hourly.sync", tenant_sync, every="1h", input={"tenant": "s", "link": 1})
    first = pw.trigger_schedule("hourly.sync")
    scheduled_for = WorkflowRun.objects.get(pk=first).scheduled_for

    orchestrate(first)

    successor = latest_of(first)
    assert successor.pk != first
    assert (successor.schedule.name, successor.scheduled_for) == ("hourly.sync", scheduled_for)
    assert pw.trigger_schedule("hourly.sync") is None  # overlap=skip: the chain is still going
