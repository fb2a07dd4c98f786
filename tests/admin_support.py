"""Helpers of the admin tests: URLs and staff clients with chosen permissions."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

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
