"""`manage.py seed_demo`: the admin/admin superuser and demo orders, created once."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.engine.operations.approval_reads import decidable_by
from pikku_workflows.models import WorkflowApproval, WorkflowRun, WorkflowStep
from pikku_workflows.status import StepStatus
from project.demo.management.commands.seed_demo import DEMO_ORDERS, DEMO_SIGNUPS
from project.demo.models import Order
from project.demo.workflows import APPROVAL_THRESHOLD
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db


def seed(**options) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **options)
    return out.getvalue()


def test_seed_demo__creates_superuser_orders_and_their_runs_once(settings):
    settings.DEBUG = True

    first = seed()
    second = seed()

    user = authenticate(username="admin", password="admin")
    assert user is not None and user.is_superuser and user.is_staff
    assert get_user_model().objects.filter(username="admin").count() == 1
    orders = len(DEMO_ORDERS)
    assert Order.objects.count() == orders
    assert "username 'admin', password 'admin'" in first
    assert "Created superuser 'admin'" in first
    assert f"{orders} created" in first
    assert "exists" in second and f"0 created, {orders} already there" in second
    # The counts say what each seed did: the second started nothing.
    signups = len(DEMO_SIGNUPS)
    assert f"; {orders} fulfilment runs started (queued for the worker" in first
    assert f"Demo signups: {signups} onboarding graph runs started." in first
    assert f"; 0 fulfilment runs started, {orders} already there." in second
    assert f"Demo signups: 0 onboarding graph runs started, {signups} already there." in second
    # One fulfilment run per order, about that order, started by admin (the large one by the
    # clerk); not repeated.
    runs = WorkflowRun.objects.filter(workflow="order_fulfilment")
    assert runs.count() == orders
    assert set(runs.values_list("subject_id", flat=True)) == {
        str(pk) for pk in Order.objects.values_list("pk", flat=True)
    }
    assert sorted(runs.values_list("started_by__username", flat=True)) == ["admin"] * (
        orders - 1
    ) + ["clerk"]
    assert set(runs.values_list("status", flat=True)) == {"running"}
    # One onboarding graph run per demo signup, not repeated either.
    onboarding = WorkflowRun.objects.filter(workflow="onboarding")
    assert onboarding.count() == len(DEMO_SIGNUPS)
    assert all(run.graph_hash for run in onboarding)


def test_seed_demo__leaves_one_approval_in_the_managers_inbox(
    settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.DEBUG = True

    with django_capture_on_commit_callbacks(execute=True):
        seed()
        seed()

    large = Order.objects.get(amount__gt=APPROVAL_THRESHOLD)
    (approval,) = WorkflowApproval.objects.all()
    assert approval.status == "pending"
    assert approval.run.subject == large
    assert approval.approvers == ["group:managers"]
    # Assigned to the managers (admin among them), not to the clerk who placed it: four eyes.
    users = get_user_model().objects
    for username, assigned in (("admin", True), ("manager", True), ("clerk", False)):
        mine = decidable_by(users.get(username=username))
        assert list(mine) == ([approval] if assigned else []), username
    # Announced by e-mail to the managers, once (the second seed started nothing).
    (mail,) = mailoutbox
    assert sorted(mail.to) == ["admin@example.com", "manager@example.com"]
    assert f"/admin/pikku_workflows/workflowapproval/{approval.pk}/decide/" in mail.body


def test_seed_demo__keeps_a_changed_password(settings):
    settings.DEBUG = True
    seed()
    user = get_user_model().objects.get(username="admin")
    user.set_password("s3cret")
    user.save()

    seed()

    assert authenticate(username="admin", password="s3cret") is not None


def test_seed_demo__refuses_without_debug_unless_forced(settings):
    settings.DEBUG = False

    with pytest.raises(CommandError, match="DEBUG is off"):
        seed()
    assert not get_user_model().objects.exists()

    seed(force=True)
    assert get_user_model().objects.filter(username="admin").exists()


@pytest.mark.django_db(transaction=True)
def test_seed_demo__the_large_order_is_charged_as_the_manager_decided(settings):
    settings.DEBUG = True
    seed()
    OrmQ.objects.all().delete()  # the other orders' first passes: not this test's business
    approval = WorkflowApproval.objects.get()
    users = get_user_model().objects

    with pytest.raises(pw.ApprovalForbidden, match="clerk lacks the permission"):
        pw.decide_approval(approval.pk, approve=True, by=users.get(username="clerk"))
    with pytest.raises(pw.InvalidInput):
        pw.decide_approval(
            approval.pk,
            approve=True,
            by=users.get(username="manager"),
            data={"discount_percent": 90},
        )
    pw.decide_approval(
        approval.pk,
        approve=True,
        by=users.get(username="manager"),
        comment="loyal customer",
        data={"discount_percent": 10, "note": "gift wrap"},
    )
    drain_queue()

    charge = WorkflowStep.objects.get(run_id=approval.run_id, step_key="charge")
    assert charge.data["amount"] == 1080.0
    assert charge.status == StepStatus.SUCCEEDED
