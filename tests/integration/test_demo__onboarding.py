"""The demo's onboarding graph (project/demo/onboarding.json) runs both of its branches: the
fan-out to the CRM (queued) and billing joins at `route`, which picks vip or standard; the vip
path waits for a manager's approval (approved: an account manager; rejected: a plain welcome);
the standard path invites each team one by one."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus
from tests.approvals import approval_of, person
from tests.graph_runs import step_keys
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_onboarding__is_registered_from_its_json_file():
    definition = registry.get_workflow("onboarding")
    assert definition.kind == "graph"
    assert definition.graph is not None
    assert set(definition.graph.nodes) >= {"validate", "crm", "billing", "route", "invite"}


def enterprise_signup() -> str:
    run_id = pw.start_workflow(
        "onboarding", {"name": "Katherine", "email": "k@example.com", "plan": "enterprise"}
    )
    drain_queue()
    return run_id


def test_onboarding__an_enterprise_signup_waits_for_a_manager_with_what_they_decide_on():
    run_id = enterprise_signup()

    run = WorkflowRun.objects.get(pk=run_id)
    approval = approval_of(run_id, "manager_ok")
    assert (run.status, approval.status, approval.approvers) == (
        RunStatus.RUNNING,
        "pending",
        ["group:managers"],
    )
    assert approval.request_data["customer"] == "Katherine"
    assert approval.request_data["account"].startswith("acct_")


@pytest.mark.parametrize(("approve", "node"), [(True, "account_manager"), (False, "vip_welcome")])
def test_onboarding__the_managers_decision_picks_the_welcome(approve, node):
    run_id = enterprise_signup()

    pw.decide_approval(
        approval_of(run_id, "manager_ok").pk, approve=approve, by=person("boss", "managers")
    )
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.state, list(run.output)) == (
        RunStatus.COMPLETED,
        {"tier": "vip"},
        [node],
    )
    expected = "meet your account manager" if approve else "Welcome aboard, Katherine: your account"
    assert expected in run.output[node]["subject"]
    assert "welcome" not in step_keys(run_id)


def test_onboarding__a_standard_signup_is_welcomed_and_its_teams_invited_in_order():
    teams = ["kernel", "git"]
    run_id = pw.start_workflow(
        "onboarding", {"name": "Linus", "email": "l@example.com", "teams": teams}
    )
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"invite": [{"invited": team, "by": "l@example.com"} for team in teams]}
    assert step_keys(run_id)[-2:] == ["invite[0]", "invite[1]"]
