"""`manage.py seed_demo`: the admin/admin superuser and demo orders, created once."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from pikku_workflows.models import WorkflowRun
from project.demo.models import Order

pytestmark = pytest.mark.django_db


def seed(**options) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **options)
    return out.getvalue()


def test_seed_demo__creates_superuser_and_orders_once(settings):
    settings.DEBUG = True

    first = seed()
    second = seed()

    user = authenticate(username="admin", password="admin")
    assert user is not None and user.is_superuser and user.is_staff
    assert get_user_model().objects.filter(username="admin").count() == 1
    assert Order.objects.count() == 2
    assert "username 'admin', password 'admin'" in first
    assert "Created superuser 'admin'" in first
    assert "2 created" in first
    assert "exists" in second and "0 created, 2 already there" in second
    assert not WorkflowRun.objects.exists()  # runs come from the engine, not from seeding


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
