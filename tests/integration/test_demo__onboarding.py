"""The demo's onboarding graph (project/demo/onboarding.json) runs both of its branches: the
fan-out to the CRM (queued) and billing joins at `route`, which picks vip or standard; the
standard path invites each team one by one."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus
from tests.graph_runs import step_keys
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_onboarding__is_registered_from_its_json_file():
    definition = registry.get_workflow("onboarding")
    assert definition.kind == "graph"
    assert definition.graph is not None
    assert set(definition.graph.nodes) >= {"validate", "crm", "billing", "route", "invite"}


def test_onboarding__an_enterprise_signup_meets_its_account_manager():
    run_id = pw.start_workflow(
        "onboarding", {"name": "Katherine", "email": "k@example.com", "plan": "enterprise"}
    )
    drain_queue()

    run = WorkflowRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.state == {"tier": "vip"}
    subject = run.output["account_manager"]["subject"]
    assert subject.startswith("Katherine, meet your account manager (account acct_")
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
