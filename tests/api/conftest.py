"""Fixtures of the API tests: users with chosen permissions, API clients, and a small shop
workflow run through the engine so the API shows reachable states."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django import forms
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowRun
from tests.queue import drain_queue

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


class Shop:
    """`api_tests.order`: reserve, charge (fails while `broken`), optionally suspend, sleep,
    ask for an approval (`approval=` `wf.approval`'s options) or wait for a signal (`signal=`
    its name), ship; like tests/shop.py's, plus the user who started each run (the API shows a
    user the runs they started)."""

    def __init__(self) -> None:
        self.broken = False

    def register(self) -> None:
        @pw.step_function("api_tests.reserve")
        def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            return {"reserved": data.get("items", [])}

        @pw.step_function("api_tests.charge")
        def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            if self.broken:
                raise ConnectionError(f"gateway down (attempt {ctx.attempt})")
            return {"charged": data.get("amount", 5)}

        @pw.step_function("api_tests.ship")
        def ship(data: dict[str, Any], ctx: pw.StepContext) -> str:
            return "shipped"

        @pw.workflow("api_tests.order", planned_steps=["reserve", "charge", "ship"])
        def order(wf: pw.Workflow, input: Any) -> dict[str, Any]:
            input = input if isinstance(input, dict) else {}
            wf.do("reserve", "api_tests.reserve", {"items": input.get("items", [])})
            charged = wf.do(
                "charge", "api_tests.charge", {"amount": input.get("amount", 5)}, retries=0
            )
            if input.get("review"):
                wf.suspend("manual review")
            if input.get("sleep"):
                wf.sleep("cool-off", input["sleep"])
            output: dict[str, Any] = {"charge": charged}
            if input.get("approval") is not None:
                decision = wf.approval("approval", **input["approval"])
                output["approval"] = {"approved": decision.approved, "data": decision.data}
            if input.get("signal"):
                output["signal"] = wf.wait_for_signal("signal", input["signal"])
            return {**output, "ship": wf.do("ship", "api_tests.ship", {})}

    def start(self, user: Any = None, **input: Any) -> WorkflowRun:
        run_id = pw.start_workflow("api_tests.order", input, inline=True, started_by=user)
        return WorkflowRun.objects.get(pk=run_id)

    def awaiting(self, user: Any = None, **options: Any) -> WorkflowApproval:
        """The pending approval of a new run started by `user`, asked with `options`."""
        input = options.pop("input", {})
        run = self.start(user, approval=options, **input)
        return WorkflowApproval.objects.get(run=run)

    def failed(self, user: Any = None, **input: Any) -> WorkflowRun:
        self.broken = True
        try:
            return self.start(user, **input)
        finally:
            self.broken = False


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Users get passwords (basic auth over real HTTP); the default hasher takes a second each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def shop() -> Shop:
    """The API tests' shop (it overrides tests/conftest.py's: its runs have a starter)."""
    shop = Shop()
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
