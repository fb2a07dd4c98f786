"""The API's OpenAPI 3 schema (drf-spectacular) and its Swagger UI and Redoc pages.

The schema covers this API's endpoints only, at the paths the host mounted them, whatever else
the host serves; its settings apply to these views only (the host's SPECTACULAR_SETTINGS keep
serving the host's own schema). Swagger UI and Redoc come from drf-spectacular-sidecar's static
files: no CDN.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response

from .serializers import ErrorSerializer, ValidationErrorSerializer

API_VERSION = "1.0"

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "pikku_workflows API",
    "DESCRIPTION": (
        "Durable workflows for Django: start runs, watch them (timeline, state, live events) "
        "and operate them; decide their approvals and send them signals; schedule them. "
        'Every error answers `{"code", "detail"}`; validation errors add `fields`.'
    ),
    "VERSION": API_VERSION,
    "PREPROCESSING_HOOKS": ["pikku_workflows.api.schema.only_this_api"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "pikku_workflows.status.RunStatus",
        "StepStatusEnum": "pikku_workflows.status.StepStatus",
        "ApprovalStatusEnum": "pikku_workflows.status.ApprovalStatus",
        "ApprovalPolicyEnum": "pikku_workflows.approvals.policy.ApprovalPolicy",
        "TickOutcomeEnum": "pikku_workflows.schedules.choices.TickOutcome",
        # A bulk operation's per-run outcome keeps its name beside the ticks' outcome.
        "OutcomeEnum": ["done", "failed"],
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

SCHEMA_URL_NAME = "pikku_workflows_api:schema"


def only_this_api(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """drf-spectacular preprocessing hook: keep the endpoints of this package's views."""
    from .views import PikkuAPIMixin

    return [
        endpoint
        for endpoint in endpoints
        if issubclass(getattr(endpoint[3], "cls", object), PikkuAPIMixin)
    ]


def documented(**kwargs: Any) -> Any:
    """`extend_schema` for a view method, built on drf-spectacular's AutoSchema even where the
    host's `DEFAULT_SCHEMA_CLASS` is DRF's own (which `extend_schema` would build on)."""

    def decorate(method: Any) -> Any:
        method.schema = AutoSchema
        return extend_schema(**kwargs)(method)

    return decorate


# What each error status of a run endpoint may carry.
RUN_ERRORS: dict[int, tuple[type, str]] = {
    400: (ValidationErrorSerializer, "INVALID_INPUT: malformed JSON or invalid values."),
    401: (ErrorSerializer, "NOT_AUTHENTICATED / AUTHENTICATION_FAILED."),
    403: (ErrorSerializer, "NOT_AUTHENTICATED (session), PERMISSION_DENIED."),
    404: (
        ErrorSerializer,
        "WORKFLOW_NOT_FOUND, RUN_NOT_FOUND (or not yours to see), NOT_FOUND.",
    ),
    409: (ErrorSerializer, "INVALID_TRANSITION, IDEMPOTENCY_CONFLICT."),
    410: (
        ErrorSerializer,
        "RUN_PURGED: the run was purged (retention); only its tombstone is left.",
    ),
    413: (ErrorSerializer, "PAYLOAD_TOO_LARGE: the body is over MAX_PAYLOAD_BYTES."),
}

# What the errors of a signal to a run carry.
SIGNAL_ERRORS: dict[int, tuple[type, str]] = {
    **RUN_ERRORS,
    403: (
        ErrorSerializer,
        "NOT_AUTHENTICATED (session); SIGNAL_FORBIDDEN: neither the run's starter nor a holder "
        "of signal_workflowrun (audited `deny`, nothing kept).",
    ),
    404: (ErrorSerializer, "RUN_NOT_FOUND (or not yours to see)."),
    409: (ErrorSerializer, "INVALID_TRANSITION: the run has ended and takes no more signals."),
}

# What the errors of an update to a run carry.
UPDATE_ERRORS: dict[int, tuple[type, str]] = {
    **SIGNAL_ERRORS,
    409: (ErrorSerializer, "INVALID_TRANSITION: the run has ended, or holds MAX_PENDING_UPDATES."),
    422: (ErrorSerializer, "UPDATE_REJECTED: the workflow's validator refused it; nothing kept."),
    504: (ErrorSerializer, "UPDATE_TIMEOUT: no reply in time; the update stays accepted."),
}

# What the errors of reading an approval carry.
APPROVAL_READ_ERRORS: dict[int, tuple[type, str]] = {
    **RUN_ERRORS,
    404: (ErrorSerializer, "APPROVAL_NOT_FOUND (or not yours to see)."),
}

# What the errors of deciding or reassigning an approval carry.
APPROVAL_ERRORS: dict[int, tuple[type, str]] = {
    **APPROVAL_READ_ERRORS,
    400: (
        ValidationErrorSerializer,
        "INVALID_INPUT: malformed JSON or invalid values; data the approval's form refuses "
        "has the form's errors under `fields.data` (the approval stays pending).",
    ),
    403: (
        ErrorSerializer,
        "NOT_AUTHENTICATED (session); PERMISSION_DENIED (without decide_workflowapproval or "
        "reassign_workflowapproval: nothing recorded); APPROVAL_FORBIDDEN (the approval's "
        "approvers or four eyes keep you out: audited `deny`).",
    ),
    409: (
        ErrorSerializer,
        "APPROVAL_RESOLVED: already settled (or its deadline passed: the expiry is recorded), "
        "or you decided it already.",
    ),
}


def errors(
    *statuses: int, described: dict[int, tuple[type, str]] = RUN_ERRORS
) -> dict[Any, OpenApiResponse]:
    """The error responses of an endpoint (JSON, whatever else it answers), with 401 and 403
    (unauthenticated: 401 or 403 depending on the host's first authentication class)."""
    chosen = sorted({401, 403, *statuses})
    return {
        (status, "application/json"): OpenApiResponse(
            described[status][0], description=described[status][1]
        )
        for status in chosen
    }


class SchemaView(SpectacularAPIView):
    custom_settings = SCHEMA_SETTINGS

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class SwaggerView(SpectacularSwaggerView):
    url_name = SCHEMA_URL_NAME
    title = SCHEMA_SETTINGS["TITLE"]

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with patched_settings(SCHEMA_SETTINGS):
            return super().get(request, *args, **kwargs)


class RedocView(SpectacularRedocView):
    url_name = SCHEMA_URL_NAME
    title = SCHEMA_SETTINGS["TITLE"]
    template_name = "pikku_workflows/redoc.html"

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with patched_settings(SCHEMA_SETTINGS):
            return super().get(request, *args, **kwargs)
