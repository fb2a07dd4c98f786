"""Who sees which runs and who may act on them (docs/http-api.md).

Reads: holders of `view_workflowrun` see every run, other users the runs they started; the host's
`RUN_QUERYSET_FILTER` hook narrows that further (tenants), and its `IDEMPOTENCY_SCOPE` hook keeps
each tenant's idempotency keys apart. A run outside that set does not
exist for the user: 404 on every endpoint under it, before any permission is asked.
Writes: starting a run needs `add_workflowrun`; each operation its own model permission
(`cancel_workflowrun`, `suspend_…`, `resume_…`, `retry_…`, `fork_…`), else 403, run untouched.
Approvals: visible to those who may decide them (or did) and to those who may read their run,
as the admin's inbox judges it, within the hook's runs; deciding needs
`decide_workflowapproval`, reassigning `reassign_workflowapproval` (then the engine judges the
approval's policy).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_permission_codename
from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

import pikku_workflows as pw

from ..approvals.policy import DECIDE_PERMISSION, REASSIGN_PERMISSION
from ..conf import pikku_settings
from ..models import WorkflowApproval, WorkflowRun, WorkflowRunTombstone
from .engine_internals import visible_to


def run_permission(action: str) -> str:
    """`pikku_workflows.<action>_workflowrun`: the model permission the admin asks too."""
    return run_model_permission(get_permission_codename(action, WorkflowRun._meta))


def run_model_permission(codename: str) -> str:
    """The permission `user.has_perm` takes for a codename of the run model's app."""
    return f"{WorkflowRun._meta.app_label}.{codename}"


def visible_runs(request: Request) -> QuerySet[WorkflowRun]:
    """The runs this user may read."""
    user = request.user
    runs = WorkflowRun.objects.all()
    if not user.is_authenticated:
        return runs.none()
    if not user.has_perm(run_permission("view")):
        runs = runs.filter(started_by=user.pk)
    return _narrowed(request, runs)


def sees_every_run(request: Request) -> bool:
    """Whether `visible_runs` is every run for this user: the view permission and no
    RUN_QUERYSET_FILTER (what a count of every run may answer from the stored counts)."""
    user = request.user
    return (
        user.is_authenticated
        and user.has_perm(run_permission("view"))
        and not pikku_settings.RUN_QUERYSET_FILTER
    )


def _narrowed(request: Request, runs: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
    """`runs` as the host's RUN_QUERYSET_FILTER narrows them for this request (tenants)."""
    hook = pikku_settings.RUN_QUERYSET_FILTER
    if hook:
        narrow = import_string(hook) if isinstance(hook, str) else hook
        runs = narrow(request, runs)
    return runs


def idempotency_scope(request: Request) -> str:
    """The namespace of this request's idempotency keys: the host's IDEMPOTENCY_SCOPE hook
    (`f(request) -> str`, e.g. the tenant), or "" without one. Keys of different scopes never
    meet, so a tenant cannot learn that another tenant's key exists."""
    hook = pikku_settings.IDEMPOTENCY_SCOPE
    if not hook:
        return ""
    scope_of = import_string(hook) if isinstance(hook, str) else hook
    scope = scope_of(request)
    if not isinstance(scope, str):
        raise ImproperlyConfigured(
            f"IDEMPOTENCY_SCOPE must return a string (the scope of the request's idempotency "
            f"keys), not {type(scope).__name__} {scope!r:.60}."
        )
    return scope


def visible_approvals(request: Request) -> QuerySet[WorkflowApproval]:
    """The approvals this user may read: those they may decide now or have decided, and those
    of runs they may read (every one with `view_workflowrun` or `view_workflowapproval`), as
    the admin's inbox shows them; always within the runs the host's hook leaves this request,
    so a tenant never sees another's approvals, even one anybody holding the decide permission
    may decide."""
    user = request.user
    approvals = WorkflowApproval.objects.all()
    if not user.is_authenticated:
        return approvals.none()
    if pikku_settings.RUN_QUERYSET_FILTER:
        approvals = approvals.filter(run__in=_narrowed(request, WorkflowRun.objects.all()))
    return visible_to(user, approvals)


def run_uuid(run_id: Any) -> uuid.UUID:
    """The run id of a URL; anything that is not a UUID names no run."""
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        raise pw.RunNotFound(run_id) from None


def visible_run_id(request: Request, run_id: Any) -> uuid.UUID:
    """The id of a run this user may read (`RunNotFound` for any other: 404, never 403;
    `RunPurged`, 410, for a purged one they could have read)."""
    pk = run_uuid(run_id)
    if not visible_runs(request).filter(pk=pk).exists():
        raise pw.RunPurged(pk) if purged_run_visible(request, pk) else pw.RunNotFound(pk)
    return pk


def purged_run_visible(request: Request, pk: Any) -> bool:
    """Whether this user may be told the run was purged: its starter, or a holder of
    `view_workflowrun`. Not where the host narrows runs (RUN_QUERYSET_FILTER): its hook judges
    runs, not tombstones, so a purged run is a 404 there like any run not yours."""
    user = request.user
    if pikku_settings.RUN_QUERYSET_FILTER or not user.is_authenticated:
        return False
    tombstones = WorkflowRunTombstone.objects.filter(pk=pk)
    if not user.has_perm(run_permission("view")):
        tombstones = tombstones.filter(started_by=user.pk)
    return tombstones.exists()


class RunPermission(IsAuthenticated):
    """Authenticated, plus the model permission of the view's `required_permission()`.

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
        codename = view.required_permission()
        return codename is None or request.user.has_perm(run_model_permission(codename))


# The model permission each approval action needs, beyond seeing the approval.
APPROVAL_PERMISSIONS = {
    "approve": DECIDE_PERMISSION,
    "reject": DECIDE_PERMISSION,
    "reassign": REASSIGN_PERMISSION,
}


class ApprovalPermission(IsAuthenticated):
    """Authenticated; deciding and reassigning also need their model permission, judged on the
    object once the approval was found visible (so an approval the user may not see stays a
    404). Whether the approval's policy lets this user decide is the engine's judgement."""

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        permission = APPROVAL_PERMISSIONS.get(view.action)
        return permission is None or request.user.has_perm(permission)
