"""Code runs across deploys: a changed fingerprint alone stops nothing (the DBOS stranding
lesson); replay goes on while every recorded key asks for the same function; the first key that
asks for another fails the run with NON_DETERMINISTIC, or suspends it with
ON_NON_DETERMINISM = "suspend", and nothing runs past it."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.dispatch import enqueue_orchestration
from pikku_workflows.models import WorkflowStep, WorkflowVersion
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def charges() -> list[str]:
    """`deploy.charge_v1` / `deploy.charge_v2` (queued), and what ran."""
    ran: list[str] = []

    @pw.step_function("deploy.charge_v1", inline=False)
    def charge_v1(data, ctx):
        ran.append("v1")
        return {"charged": "v1"}

    @pw.step_function("deploy.charge_v2", inline=False)
    def charge_v2(data, ctx):
        ran.append("v2")
        return {"charged": "v2"}

    @pw.step_function("deploy.ship")
    def ship(data, ctx):
        ran.append("ship")
        return {"shipped": True}

    return ran


def deploy(name: str, body) -> None:
    """What a deploy does to this process: the workflow's code is replaced."""
    registry.workflows.pop(name, None)
    pw.workflow(name)(body)


def test_deploy__a_run_goes_on_under_new_code_whose_fingerprint_changed(charges):
    def v1(wf, input):
        charged = wf.do("charge", "deploy.charge_v1", {})
        return {"charge": charged}

    def v2(wf, input):
        charged = wf.do("charge", "deploy.charge_v1", {})
        wf.do("ship", "deploy.ship", {})  # a new step after the recorded ones
        return {"charge": charged, "v": 2}

    deploy("deploy.order", v1)
    run_id = pw.start_workflow("deploy.order", {})
    v1_version = load_run(run_id).code_version
    from pikku_workflows.engine.replay.orchestrator import orchestrate

    orchestrate(run_id)  # parks on the queued charge

    deploy("deploy.order", v2)
    assert registry.get_workflow("deploy.order").code_version != v1_version
    drain_queue()

    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"charge": {"charged": "v1"}, "v": 2})
    assert run.code_version == v1_version  # the version it started on, kept for the admin
    assert charges == ["v1", "ship"]


@pytest.fixture
def switched_run(charges):
    """A run that recorded `charge` by charge_v1 and sleeps, then a deploy that calls
    charge_v2 there."""

    def v1(wf, input):
        charged = wf.do("charge", "deploy.charge_v1", {})
        wf.sleep("cool-off", "1h")
        return charged

    def v2(wf, input):
        try:
            charged = wf.do("charge", "deploy.charge_v2", {})
        except Exception:  # a broad except in the body cannot swallow the divergence
            return "swallowed"
        wf.do("ship", "deploy.ship", {})
        return charged

    deploy("deploy.switch", v1)
    run_id = pw.start_workflow("deploy.switch", {})
    drain_queue()
    assert charges == ["v1"]
    deploy("deploy.switch", v2)
    enqueue_orchestration(run_id)  # the next pass (a timer, a resume, a redelivery)
    return run_id


def test_deploy__the_first_key_asking_for_another_function_fails_non_deterministic(
    charges, switched_run
):
    drain_queue()

    run = load_run(switched_run)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "NON_DETERMINISTIC"
    assert run.error["step_key"] == "charge"
    assert "'deploy.charge_v2'" in run.error["message"]
    assert "'deploy.charge_v1'" in run.error["message"]
    assert charges == ["v1"]  # v2 and ship never ran
    keys = WorkflowStep.objects.filter(run_id=switched_run).values_list("step_key", flat=True)
    assert sorted(keys) == ["charge", "cool-off"]


def test_deploy__with_on_non_determinism_suspend_the_run_waits_for_an_operator(
    charges, switched_run
):
    with override_settings(PIKKU_WORKFLOWS={"ON_NON_DETERMINISM": "suspend"}):
        drain_queue()

    run = load_run(switched_run)
    assert run.status == RunStatus.SUSPENDED
    assert (run.error["code"], run.error["step_key"]) == ("NON_DETERMINISTIC", "charge")
    assert charges == ["v1"]
    assert pw.get_run_status(switched_run)["waiting_on"]["kind"] == "suspend"
    step = WorkflowStep.objects.get(run_id=switched_run, step_key="charge")
    assert (step.status, step.result) == (StepStatus.SUCCEEDED, {"charged": "v1"})

    # The operator's way out: cancel it, then fork it to re-run from the diverging step.
    pw.cancel_run(switched_run, reason="diverged after deploy")
    fork_id = pw.fork_run(switched_run, from_step="charge")
    drain_queue()
    assert load_run(fork_id).output == {"charged": "v2"}


def test_deploy__each_version_a_run_started_on_is_recorded(charges):
    def v1(wf, input):
        return wf.do("charge", "deploy.charge_v1", {})

    def v2(wf, input):
        return wf.do("charge", "deploy.charge_v2", {})

    deploy("deploy.versions", v1)
    first = pw.start_workflow("deploy.versions", {})
    deploy("deploy.versions", v2)
    second = pw.start_workflow("deploy.versions", {})

    versions = set(
        WorkflowVersion.objects.filter(name="deploy.versions").values_list("graph_hash", "kind")
    )
    assert versions == {
        (load_run(first).code_version, "dsl"),
        (load_run(second).code_version, "dsl"),
    }
    assert load_run(first).code_version != load_run(second).code_version
