"""Approval nodes through the engine: a graph node with `approval` options parks its run on a
`WorkflowApproval` exactly as `wf.approval` does, reads other nodes' results into its data,
branches on the outcome (approved / rejected / expired), fails as a node on an expiry with
on_expire "fail" (its on_error handler runs first), and re-opens from the options its step kept
after `retry_run`."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowApproval
from pikku_workflows.status import ApprovalStatus, RunStatus, StepKind, StepStatus
from tests.approvals import approval_of, finished, past_deadline, person
from tests.graph_runs import Calls, graph_steps, register_graph_functions
from tests.rows import load_run, load_step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BRANCHES = {"approved": "ship", "rejected": "refund", "expired": "chase"}


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


def order_graph(name: str = "graph.order", **approval: Any) -> str:
    """quote -> an approval of the quote's total -> ship, refund or chase by the outcome."""
    pw.graph_workflow(
        name,
        {
            "entry": "quote",
            "nodes": {
                "quote": {"function": "g.echo", "next": "manager_ok"},
                "manager_ok": {
                    "approval": {
                        "approvers": ["group:managers"],
                        "summary": "Ship this order",
                        "data": {"total": {"$ref": "quote", "path": "total"}},
                        **approval,
                    },
                    "next": BRANCHES,
                },
                "ship": {"function": "g.echo", "input": {"$ref": "manager_ok", "path": "comment"}},
                "refund": {"function": "g.echo"},
                "chase": {"function": "g.echo"},
            },
        },
    )
    return name


def test_approval_node__parks_the_run_on_an_approval_with_the_data_it_reads(calls):
    run_id = pw.start_workflow(order_graph(expires_in="2d"), {"total": 120}, inline=True)

    run = load_run(run_id)
    step = load_step(run_id, "manager_ok")
    approval = approval_of(run_id, "manager_ok")
    assert run.status == RunStatus.RUNNING
    assert (step.kind, step.status, step.from_step_key) == (
        StepKind.APPROVAL,
        StepStatus.WAITING,
        "quote",
    )
    assert (approval.status, approval.approvers, approval.summary, approval.request_data) == (
        ApprovalStatus.PENDING,
        ["group:managers"],
        "Ship this order",
        {"total": 120},
    )
    assert approval.expires_at == step.wake_at
    assert pw.get_run_status(run_id)["waiting_on"]["approval_id"] == str(approval.pk)

    orchestrate(run_id)  # a replay reads the waiting step: no second approval
    assert WorkflowApproval.objects.filter(run_id=run_id).count() == 1
    assert calls.keys == ["quote"]


@pytest.mark.parametrize(("approve", "taken"), [(True, "ship"), (False, "refund")])
def test_approval_node__branches_on_the_decision(calls, approve, taken):
    run_id = pw.start_workflow(order_graph(), {"total": 120}, inline=True)
    manager = person("manager", "managers")

    pw.decide_approval(
        approval_of(run_id, "manager_ok").pk, approve=approve, by=manager, comment="fine"
    )

    run = finished(run_id)
    assert run.status == RunStatus.COMPLETED
    assert calls.keys == ["quote", taken]
    step = load_step(run_id, "manager_ok")
    assert (step.status, step.branch_taken) == (
        StepStatus.SUCCEEDED,
        "approved" if approve else "rejected",
    )
    assert step.result["decided_by"] == "manager"
    if approve:
        assert run.output == {"ship": "fine"}  # the node read the outcome's comment
    else:
        assert run.output["refund"]["status"] == "rejected"  # the outcome is the next input


def test_approval_node__an_expiry_takes_the_expired_branch(calls):
    run_id = pw.start_workflow(order_graph(expires_in="1h"), {"total": 120}, inline=True)
    past_deadline(approval_of(run_id, "manager_ok"))

    assert fire_due_timers() == 1

    run = finished(run_id)
    assert (run.status, calls.keys) == (RunStatus.COMPLETED, ["quote", "chase"])
    assert run.output["chase"]["status"] == "expired"


def test_approval_node__expiring_with_on_expire_fail_fails_the_node_after_its_handler(calls):
    pw.graph_workflow(
        "graph.strict",
        {
            "entry": "ok",
            "nodes": {
                "ok": {
                    "approval": {"expires_in": "1h", "on_expire": "fail"},
                    "on_error": "alert",
                    "next": "ship",
                },
                "alert": {"function": "g.echo"},
                "ship": {"function": "g.echo"},
            },
        },
    )
    run_id = pw.start_workflow("graph.strict", {}, inline=True)
    past_deadline(approval_of(run_id, "ok"))

    fire_due_timers()

    run = finished(run_id)
    assert (run.status, run.error["code"], run.error["step_key"]) == (
        RunStatus.FAILED,
        "GRAPH_NODE_FAILED",
        "ok",
    )
    assert graph_steps(run_id) == [
        ("ok", StepStatus.FAILED, None),
        ("ok:onError", StepStatus.SUCCEEDED, "ok"),
    ]
    assert calls.data_of("ok:onError")["error"]["code"] == "APPROVAL_EXPIRED"


def test_approval_node__retry_run_reopens_it_from_the_options_its_step_kept(calls):
    pw.graph_workflow(
        "graph.strict_retry",
        {
            "entry": "ok",
            "nodes": {
                "ok": {
                    "approval": {
                        "approvers": ["group:managers"],
                        "expires_in": "1h",
                        "on_expire": "fail",
                    },
                    "next": "ship",
                },
                "ship": {"function": "g.echo", "input": {"$ref": "ok", "path": "approved"}},
            },
        },
    )
    run_id = pw.start_workflow("graph.strict_retry", {}, inline=True)
    past_deadline(approval_of(run_id, "ok"))
    fire_due_timers()
    assert finished(run_id).status == RunStatus.FAILED

    pw.retry_run(run_id)
    finished(run_id)
    second = approval_of(run_id, "ok", attempt=2)
    assert (second.status, second.approvers) == (ApprovalStatus.PENDING, ["group:managers"])
    pw.decide_approval(second.pk, approve=True, by=person("manager", "managers"))

    run = finished(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"ship": True})


def test_approval_node__a_branch_no_outcome_can_take_is_refused_at_registration():
    with pytest.raises(pw.InvalidInput) as raised:
        pw.graph_workflow(
            "graph.typo",
            {
                "entry": "ok",
                "nodes": {
                    "ok": {"approval": {}, "next": {"approve": "ship"}},
                    "ship": {"function": "g.echo"},
                },
            },
        )

    assert raised.value.problems == [
        "node 'ok': next: an approval node branches on its outcome "
        "(approved, rejected, expired), not 'approve'"
    ]
