"""`pikku_workflows.testing.approve`, `reject` and `signal` (and the same on the `workflows`
fixture): they drain the run to its wait, decide or signal as a person or system would (under
the approval's own rules), and drain it to its end; in pytest and in Django's `TestCase`, on
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import TestCase

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApprovalDecision
from pikku_workflows.testing import ApprovalNotPending, approve, reject, signal
from tests.approvals import person


def register_purchase() -> None:
    """A queued quote, then a manager's approval, then a wait for the supplier's confirmation."""

    @pw.step_function("helpers.quote", inline=False)
    def quote(data: Any, ctx: pw.StepContext) -> dict[str, Any]:
        return {"total": data["total"]}

    @pw.workflow("helpers.purchase")
    def purchase(wf: pw.Workflow, input: Any) -> Any:
        quoted = wf.do("quote", "helpers.quote", input)
        decision = wf.approval("manager-ok", approvers=["group:managers"], data=quoted)
        if not decision.approved:
            return {"ordered": False, "why": decision.comment}
        confirmation = wf.wait_for_signal("confirmation", "supplier-confirmed")
        return {"ordered": True, "by": decision.decided_by, "ref": confirmation["ref"]}


@pytest.fixture
def purchase(db: Any) -> None:
    register_purchase()


def test_approve__drains_to_the_approval_decides_it_and_drains_on(purchase):
    manager = person("manager", "managers")
    run_id = pw.start_workflow("helpers.purchase", {"total": 900})  # queued: nothing ran yet

    waiting = approve(run_id, "manager-ok", by=manager, comment="fine")

    assert waiting["status"] == "running"
    assert waiting["waiting_on"]["kind"] == "signal"
    decision = WorkflowApprovalDecision.objects.get()
    assert (decision.user, decision.approve, decision.comment) == (manager, True, "fine")

    done = signal(run_id, "supplier-confirmed", {"ref": "PO-1"})
    assert (done["status"], done["output"]) == (
        "completed",
        {"ordered": True, "by": "manager", "ref": "PO-1"},
    )


def test_reject__takes_the_rejected_path(purchase):
    run_id = pw.start_workflow("helpers.purchase", {"total": 900})

    done = reject(run_id, "manager-ok", by=person("manager", "managers"), comment="too much")

    assert (done["status"], done["output"]) == ("completed", {"ordered": False, "why": "too much"})


def test_approve__keeps_the_approvals_rules(purchase):
    run_id = pw.start_workflow("helpers.purchase", {"total": 900})

    with pytest.raises(pw.ApprovalForbidden):
        approve(run_id, "manager-ok", by=person("clerk"))

    assert pw.get_run_status(run_id)["waiting_on"]["kind"] == "approval"


def test_approve__a_step_that_is_not_a_pending_approval_is_a_clear_failure(purchase):
    run_id = pw.start_workflow("helpers.purchase", {"total": 900})

    with pytest.raises(ApprovalNotPending, match="no pending approval at step 'manager-okay'"):
        approve(run_id, "manager-okay", by=person("manager", "managers"))


def test_workflows_fixture__offers_approve_and_signal(purchase, workflows):
    run_id = pw.start_workflow("helpers.purchase", {"total": 900})

    workflows.approve(run_id, "manager-ok", by=person("manager", "managers"))
    done = workflows.signal(run_id, "supplier-confirmed", {"ref": "PO-2"})

    assert done["output"]["ref"] == "PO-2"


class ApproveInTestCaseTests(TestCase):
    """Inside TestCase's transaction no queue message is ever sent: the helpers still work."""

    def test_approve_then_signal(self) -> None:
        register_purchase()
        run_id = pw.start_workflow("helpers.purchase", {"total": 900})

        approve(run_id, "manager-ok", by=person("manager", "managers"))
        done = signal(run_id, "supplier-confirmed", {"ref": "PO-3"})

        self.assertEqual(done["status"], "completed")
