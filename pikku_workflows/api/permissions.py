"""Who sees which runs and who may act on them (DESIGN §7).

Reads: holders of `view_workflowrun` see every run, other users the runs they started; the host's
`RUN_QUERYSET_FILTER` hook narrows that further (tenants). A run outside that set does not
exist for the user: 404 on every endpoint under it, before any permission is asked.
Writes: starting a run needs `add_workflowrun`; each operation its own model permission
(`cancel_workflowrun`, `suspend_…`, `resume_…`, `retry_…`, `fork_…`), else 403, run untouched.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

import pikku_workflows as pw

from ..conf import pikku_settings
from ..models import WorkflowRun


def run_permission(action: str) -> str:
    """`pikku_workflows.<action>_workflowrun`: the model permission the admin asks too."""
    opts = WorkflowRun._meta
    return f"{opts.app_label}.{get_permission_codename(action, opts)}"


def visible_runs(request: Request) -> QuerySet[WorkflowRun]:
    """The runs this user may read."""
    user = request.user
    runs = WorkflowRun.objects.all()
    if not user.is_authenticated:
        return runs.none()
    if not user.has_perm(run_permission("view")):
        runs = runs.filter(started_by=user.pk)
    hook = pikku_settings.RUN_QUERYSET_FILTER
    if hook:
        narrow = import_string(hook) if isinstance(hook, str) else hook
        runs = narrow(request, runs)
    return runs


def run_uuid(run_id: Any) -> uuid.UUID:
    """The run id of a URL; anything that is not a UUID names no run."""
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        raise pw.RunNotFound(run_id) from None


def visible_run_id(request: Request, run_id: Any) -> uuid.UUID:
    """The id of a run this user may read (`RunNotFound` for any other: 404, never 403)."""
    pk = run_uuid(run_id)
    if not visible_runs(request).filter(pk=pk).exists():
        raise pw.RunNotFound(pk)
    return pk


class RunPermission(IsAuthenticated):
    """Authenticated, plus the model permission of the view's `required_action()`.

    Per-run operations are judged on the object, after the run was found visible (so a run
    the user may not see stays a 404); the others (start, bulk) before the view runs.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if getattr(view, "detail", False) and getattr(view, "permissions_per_run", False):
            return True  # judged in has_object_permission, once the run is found visible
        return self._allowed(request, view)

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return self._allowed(request, view)

    @staticmethod
    def _allowed(request: Request, view: Any) -> bool:
        action = view.required_action()
        return action is None or request.user.has_perm(run_permission(action))
