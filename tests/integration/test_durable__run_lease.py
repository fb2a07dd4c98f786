"""The run lease: a pass that finds it held asks the holder for one more pass and acknowledges."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.leases import acquire_run_lease, release_run_lease
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOIN_TIMEOUT = 30


def lease_of(run_id: str) -> tuple:
    return WorkflowRun.objects.filter(pk=run_id).values_list(
        "lease_holder", "rerun_requested", "lease_expires_at"
    )[0]


@pytest.fixture
def passes() -> list[str]:
    """`lease.napper`: records each pass, then parks on an hour's sleep."""
    seen: list[str] = []

    @pw.workflow("lease.napper")
    def napper(wf: pw.Workflow, input: dict) -> None:
        seen.append("pass")
        wf.sleep("nap", "1h")

    return seen


def test_orchestrate__lease_held_elsewhere_requests_a_rerun_and_returns(passes):
    run_id = pw.start_workflow("lease.napper")
    assert acquire_run_lease(run_id, "elsewhere")
    holder, rerun, expires = lease_of(run_id)
    assert (holder, rerun) == ("elsewhere", False)

    orchestrate(run_id)

    assert passes == []  # the body never ran in the second pass
    assert not WorkflowStep.objects.filter(run_id=run_id).exists()
    assert lease_of(run_id)[:2] == ("elsewhere", True)

    # The holder, about to release, learns of the request: no release, flag cleared, lease kept.
    assert release_run_lease(run_id, "elsewhere") is False
    holder, rerun, renewed = lease_of(run_id)
    assert (holder, rerun) == ("elsewhere", False)
    assert renewed >= expires
    # After its extra pass the holder releases for good.
    assert release_run_lease(run_id, "elsewhere") is True
    assert lease_of(run_id) == (None, False, None)


def test_orchestrate__free_lease_after_a_release_is_taken_by_the_next_pass(passes):
    run_id = pw.start_workflow("lease.napper")
    assert acquire_run_lease(run_id, "elsewhere")
    assert release_run_lease(run_id, "elsewhere") is True

    orchestrate(run_id)

    assert passes == ["pass"]
    assert lease_of(run_id) == (None, False, None)
    assert WorkflowStep.objects.get(run_id=run_id, step_key="nap").status == StepStatus.SCHEDULED


def test_orchestrate__holder_runs_one_more_pass_for_a_message_that_found_the_lease_held():
    # While the first pass runs its step, a second message arrives for the run (from another
    # thread, as another worker would): it must not wait or run the body, and the holder must
    # replay once more before it releases, so what the message announced is not lost.
    bodies: list[str] = []
    second: list[BaseException] = []

    def second_message(run_id: str) -> None:
        try:
            orchestrate(run_id)
        except BaseException as exc:
            second.append(exc)
        finally:
            connection.close()

    @pw.step_function("lease.nudge")
    def nudge(data: dict, ctx: pw.StepContext) -> str:
        thread = threading.Thread(target=second_message, args=(ctx.run_id,), daemon=True)
        thread.start()
        thread.join(JOIN_TIMEOUT)
        assert not thread.is_alive()
        return "nudged"

    @pw.workflow("lease.nudged")
    def nudged(wf: pw.Workflow, input: dict) -> None:
        bodies.append(wf.do("nudge", "lease.nudge", {}))
        wf.sleep("nap", "1h")

    run_id = pw.start_workflow("lease.nudged")
    orchestrate(run_id)

    assert second == []
    assert bodies == ["nudged", "nudged"]  # the holder's pass, then the pass it owed
    assert lease_of(run_id) == (None, False, None)
    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.RUNNING
    drain_queue()  # the start message: one more harmless pass
    assert bodies == ["nudged", "nudged", "nudged"]
