"""The API's one exception handler: every error answers `{"code", "detail"}` (docs/http-api.md).

Domain errors (`pw.WorkflowError`) keep their stable `code` and get the status docs/http-api.md gives it;
DRF's own errors (authentication, permissions, routing, throttling) keep their status and name
their code after DRF's (`NOT_AUTHENTICATED`, `PERMISSION_DENIED`, ...); validation and parse
errors are `INVALID_INPUT`, validation errors with DRF's field detail under `fields`; a body
over a limit is 413 `PAYLOAD_TOO_LARGE`, naming the limit.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

import pikku_workflows as pw

logger = logging.getLogger(__name__)

INVALID_INPUT = pw.InvalidInput.code

# The HTTP status of each domain error the API can meet (docs/http-api.md); subclasses inherit theirs.
STATUS_BY_ERROR: dict[type[pw.WorkflowError], int] = {
    pw.WorkflowNotFound: status.HTTP_404_NOT_FOUND,
    pw.RunNotFound: status.HTTP_404_NOT_FOUND,
    pw.RunPurged: status.HTTP_410_GONE,
    pw.LimitNotFound: status.HTTP_404_NOT_FOUND,
    pw.ScheduleNotFound: status.HTTP_404_NOT_FOUND,
    pw.InvalidInput: status.HTTP_400_BAD_REQUEST,
    pw.InvalidTransition: status.HTTP_409_CONFLICT,
    pw.IdempotencyConflict: status.HTTP_409_CONFLICT,
    pw.ApprovalResolved: status.HTTP_409_CONFLICT,
    pw.ApprovalForbidden: status.HTTP_403_FORBIDDEN,
    pw.SignalForbidden: status.HTTP_403_FORBIDDEN,
    pw.UpdateRejected: status.HTTP_422_UNPROCESSABLE_ENTITY,
    pw.UpdateTimeout: status.HTTP_504_GATEWAY_TIMEOUT,
    # Not among the documented codes' statuses; a 404 like every other id that names nothing (or nothing yours).
    pw.ApprovalNotFound: status.HTTP_404_NOT_FOUND,
}


class PayloadTooLarge(exceptions.APIException):
    """A request body over a limit: the API's own (`MAX_PAYLOAD_BYTES`), or Django's
    (`DATA_UPLOAD_MAX_MEMORY_SIZE`) where something read the body before the API did."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(f"The request body is over {limit} bytes, the limit ({setting}).")


def status_of(error: pw.WorkflowError) -> int:
    """The HTTP status of a domain error; one not mapped here is the server's fault (500)."""
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return status.HTTP_500_INTERNAL_SERVER_ERROR


def error_body(error: pw.WorkflowError) -> dict[str, Any]:
    """`{"code", "detail"}` of a domain error, as a response and as a bulk outcome; invalid
    input that lists several problems (a graph definition's) adds them as `problems`."""
    body: dict[str, Any] = {"code": error.code, "detail": error.message}
    problems = getattr(error, "problems", None)
    if problems and list(problems) != [error.message]:
        body["problems"] = list(problems)
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's `EXCEPTION_HANDLER` for the pikku views (set on the views, not globally, so the
    host's own handler keeps serving the host's views)."""
    if isinstance(exc, pw.WorkflowError):
        answer = status_of(exc)
        if answer >= status.HTTP_500_INTERNAL_SERVER_ERROR:
            logger.error("pikku_workflows API: unmapped %s", exc.code, exc_info=exc)
        set_rollback()
        return Response(error_body(exc), status=answer)
    if isinstance(exc, DataError):
        # The database refused a value that got past validation (an out-of-range number, a
        # string it cannot encode): bad input, never a server error.
        set_rollback()
        body = {"code": INVALID_INPUT, "detail": f"The database refused a value: {exc}"}
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "DATA_UPLOAD_MAX_MEMORY_SIZE")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    response.data = _reshaped(exc, response.data)
    return response


def _reshaped(exc: Exception, data: Any) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        fields = data if isinstance(data, dict) else {api_settings.NON_FIELD_ERRORS_KEY: data}
        return {"code": INVALID_INPUT, "detail": _first_message(fields), "fields": fields}
    if isinstance(exc, exceptions.ParseError):
        return {"code": INVALID_INPUT, "detail": str(data.get("detail", exc))}
    detail = data.get("detail", "") if isinstance(data, dict) else data
    code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
    return {"code": str(code).upper(), "detail": str(detail)}


def _first_message(fields: dict[str, Any]) -> str:
    """`name: message` of the first field error, so `detail` reads well on its own."""
    for name, errors in fields.items():
        while isinstance(errors, dict | list) and errors:
            if isinstance(errors, dict):
                name, errors = f"{name}.{next(iter(errors))}", next(iter(errors.values()))
            else:
                errors = errors[0]
        if errors:
            return f"{name}: {errors}"
    return "Invalid input."
