"""Helpers of the admin tests: URLs, staff clients with chosen permissions, and small workflows
run through the engine so the admin shows reachable states."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

CHANGELIST = reverse("admin:pikku_workflows_workflowrun_changelist")
OPERATION_PERMISSIONS = (
    "cancel_workflowrun",
    "suspend_workflowrun",
    "resume_workflowrun",
    "retry_workflowrun",
    "fork_workflowrun",
)


def change_url(run: WorkflowRun | str | uuid.UUID) -> str:
    pk = run.pk if isinstance(run, WorkflowRun) else run
    return reverse("admin:pikku_workflows_workflowrun_change", args=[pk])


def operation_url(run: WorkflowRun | str | uuid.UUID, operation: str) -> str:
    pk = run.pk if isinstance(run, WorkflowRun) else run
    return reverse("admin:pikku_workflows_workflowrun_operation", args=[pk, operation])


def listed_ids(response: Any) -> set[uuid.UUID]:
    assert response.status_code == 200
    return {run.pk for run in response.context["cl"].result_list}


def staff_client(django_user_model: Any, username: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(username, password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


class Shop:
    """A small order workflow whose steps the tests steer: `charge` fails while `broken`."""

    def __init__(self) -> None:
        self.broken = False

    def register(self) -> None:
        @pw.step_function("admin_tests.reserve")
        def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            return {"reserved": data.get("items", [])}

        @pw.step_function("admin_tests.charge")
        def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            if self.broken:
                raise ConnectionError(f"gateway down (attempt {ctx.attempt})")
            return {"charged": data.get("amount", 5)}

        @pw.step_function("admin_tests.ship")
        def ship(data: dict[str, Any], ctx: pw.StepContext) -> str:
            return "shipped"

        @pw.workflow("admin_tests.order", planned_steps=["reserve", "charge", "ship"])
        def order(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
            wf.do("reserve", "admin_tests.reserve", {"items": input.get("items", [])})
            charged = wf.do(
                "charge",
                "admin_tests.charge",
                {"amount": input.get("amount", 5)},
                retries=input.get("retries", 0),
                retry_delay=input.get("retry_delay", 0),
            )
            if input.get("review"):
                wf.suspend("manual review")
            if input.get("sleep"):
                wf.sleep("cool-off", input["sleep"])
            if input.get("invoice"):
                wf.do("invoice", "admin_tests.invoice", {"sleep": input["invoice"]})
            return {"charge": charged, "ship": wf.do("ship", "admin_tests.ship", {})}

        @pw.workflow("admin_tests.invoice")
        def invoice(wf: pw.Workflow, input: dict[str, Any]) -> str:
            wf.sleep("render-later", input["sleep"])
            return "INV-1"

    def start(self, **input: Any) -> WorkflowRun:
        run_id = pw.start_workflow("admin_tests.order", input, inline=True)
        return WorkflowRun.objects.get(pk=run_id)

    def failed(self, **input: Any) -> WorkflowRun:
        self.broken = True
        try:
            return self.start(**input)
        finally:
            self.broken = False
