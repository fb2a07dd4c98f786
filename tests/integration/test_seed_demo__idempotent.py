"""`manage.py seed_demo`: the admin/admin superuser and demo orders, created once."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from pikku_workflows.models import WorkflowRun
from project.demo.management.commands.seed_demo import DEMO_ORDERS, DEMO_SIGNUPS
from project.demo.models import Order

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
    # One queued fulfilment run per order, about that order, started by admin; not repeated.
    runs = WorkflowRun.objects.filter(workflow="order_fulfilment")
    assert runs.count() == orders
    assert set(runs.values_list("subject_id", flat=True)) == {
        str(pk) for pk in Order.objects.values_list("pk", flat=True)
    }
    assert set(runs.values_list("started_by__username", flat=True)) == {"admin"}
    assert set(runs.values_list("status", flat=True)) == {"running"}
    # One onboarding graph run per demo signup, not repeated either.
    onboarding = WorkflowRun.objects.filter(workflow="onboarding")
    assert onboarding.count() == len(DEMO_SIGNUPS)
    assert all(run.graph_hash for run in onboarding)


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
