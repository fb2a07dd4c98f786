"""Fixtures of the API tests: users with chosen permissions, API clients, and the test shop
(tests/shop.py) as `api_tests.*`, so the API shows reachable states."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django import forms
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from pikku_workflows.api import event_watcher, events
from tests.queue import drain_queue
from tests.shop import Shop

API = "/api/workflows/"
# An approval's form (`shop.awaiting(form=PURCHASE)`): what the decider fills in.
PURCHASE = "tests.api.conftest.Purchase"


class Purchase(forms.Form):
    cost_centre = forms.RegexField(regex=r"^CC-\d{3}$")
    budget = forms.DecimalField(min_value=0, max_digits=10, decimal_places=2)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("cost_centre") == "CC-000":
            raise forms.ValidationError("CC-000 takes no purchases.")
        return cleaned


@pytest.fixture
def shop() -> Shop:
    """The test shop as `api_tests.*` (it overrides tests/conftest.py's `admin_tests.*`)."""
    shop = Shop("api_tests")
    shop.register()
    return shop


@pytest.fixture
def make_user(django_user_model: Any) -> Callable[..., Any]:
    def make(username: str, *codenames: str, **fields: Any) -> Any:
        user = django_user_model.objects.create_user(username, password="pw", **fields)
        user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
        return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache

    return make


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def alice(make_user: Callable[..., Any]) -> Any:
    """A user without permissions: she sees the runs she started."""
    return make_user("alice")


@pytest.fixture
def operator(make_user: Callable[..., Any]) -> Any:
    """A user who sees every run and holds every run permission."""
    return make_user(
        "operator",
        "add_workflowrun",
        "view_workflowrun",
        "cancel_workflowrun",
        "suspend_workflowrun",
        "resume_workflowrun",
        "retry_workflowrun",
        "fork_workflowrun",
        "signal_workflowrun",
    )


@pytest.fixture
def operator_api(client_for: Callable[[Any], APIClient], operator: Any) -> APIClient:
    return client_for(operator)


@pytest.fixture
def worker(django_capture_on_commit_callbacks: Any) -> Callable[[Callable[[], Any]], Any]:
    """`worker(lambda: api.post(...))`: make the request, send what it queued after its commit
    (the test's transaction never commits), then do what a worker would: drain the queue."""

    def run(request: Callable[[], Any]) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            response = request()
        drain_queue()
        return response

    return run


@pytest.fixture
def fast_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Event streams that notice changes and send heartbeats within a fraction of a second."""
    monkeypatch.setattr(event_watcher, "TICK_SECONDS", 0.02)
    monkeypatch.setattr(events, "HEARTBEAT_SECONDS", 0.2)
