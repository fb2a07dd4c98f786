"""The orchestrator pass under the run lease: a held lease defers to its holder
(`rerun_requested`), a lapsed one is taken over, and a requested rerun replays once more."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.engine.store.leases import request_rerun
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def passes():
    """A queued (not yet orchestrated) run of a one-step workflow; returns (run_id, passes)."""
    calls = []

    @pw.workflow("lease.counted")
    def counted(wf, input):
        calls.append(wf.run_id)
        return wf.do("only", lambda: "done")

    return pw.start_workflow("lease.counted", {}), calls


def _hold_lease(run_id: str, expires_in: timedelta) -> None:
    WorkflowRun.objects.filter(pk=run_id).update(
        lease_holder="another-pass", lease_expires_at=timezone.now() + expires_in
    )


def test_run_lease__held_elsewhere_requests_a_rerun_and_runs_nothing(passes):
    run_id, calls = passes
    _hold_lease(run_id, timedelta(seconds=30))

    orchestrate(run_id)

    assert calls == []
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.lease_holder, run.rerun_requested) == (
        RunStatus.RUNNING,
        "another-pass",
        True,
    )


def test_run_lease__lapsed_lease_is_taken_over(passes):
    run_id, calls = passes
    _hold_lease(run_id, timedelta(seconds=-1))

    orchestrate(run_id)

    assert calls == [run_id]
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.lease_holder, run.lease_expires_at) == (
        RunStatus.COMPLETED,
        "done",
        None,
        None,
    )


def test_run_lease__rerun_requested_during_a_pass_replays_once_more():
    calls = []

    @pw.workflow("lease.asks_again")
    def asks_again(wf, input):
        calls.append(1)
        # Another message arrives while this pass holds the lease.
        wf.do("nudge", lambda: request_rerun(wf.run_id))
        wf.sleep("park", "1h")

    run_id = pw.start_workflow("lease.asks_again", {}, inline=True)

    assert calls == [1, 1]
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.lease_holder, run.rerun_requested) == (RunStatus.RUNNING, None, False)


def test_run_lease__held_during_the_pass_and_released_after():
    seen = []

    @pw.workflow("lease.looks")
    def looks(wf, input):
        seen.append(
            WorkflowRun.objects.values("lease_holder", "lease_expires_at").get(pk=wf.run_id)
        )

    looked_id = pw.start_workflow("lease.looks", {}, inline=True)

    (during,) = seen
    assert during["lease_holder"] is not None
    assert during["lease_expires_at"] > timezone.now()
    run = WorkflowRun.objects.get(pk=looked_id)
    assert (run.lease_holder, run.lease_expires_at) == (None, None)


def test_run_lease__failed_pass_releases_the_lease():
    @pw.workflow("lease.fails")
    def fails(wf, input):
        raise RuntimeError("bad body")

    run_id = pw.start_workflow("lease.fails", {}, inline=True)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.lease_holder, run.lease_expires_at) == (RunStatus.FAILED, None, None)


def test_orchestrate__unregistered_workflow_suspends_the_run(passes):
    run_id, calls = passes
    del registry.workflows["lease.counted"]

    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.SUSPENDED, "WORKFLOW_NOT_FOUND")
    assert run.lease_holder is None
    assert calls == []


def test_orchestrate__unknown_run_id_does_nothing():
    orchestrate("00000000-0000-0000-0000-000000000000")

    assert not WorkflowRun.objects.exists()
