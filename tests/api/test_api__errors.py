"""The one exception handler: the documented codes and statuses, DRF's errors, database refusals."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from rest_framework import exceptions

import pikku_workflows as pw
from pikku_workflows.api.errors import PayloadTooLarge, exception_handler
from pikku_workflows.api.parsers import StrictJSONParser


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (pw.WorkflowNotFound("x"), 404, "WORKFLOW_NOT_FOUND"),
        (pw.RunNotFound("x"), 404, "RUN_NOT_FOUND"),
        (pw.InvalidInput("bad"), 400, "INVALID_INPUT"),
        (pw.InvalidTransition("run", "completed", "suspended"), 409, "INVALID_TRANSITION"),
        (pw.IdempotencyConflict("w", "k"), 409, "IDEMPOTENCY_CONFLICT"),
        (pw.ApprovalResolved(), 409, "APPROVAL_RESOLVED"),
        (pw.ApprovalForbidden(), 403, "APPROVAL_FORBIDDEN"),
        (pw.SignalForbidden(), 403, "SIGNAL_FORBIDDEN"),
    ],
)
def test_handler__domain_errors_answer_design_statuses_with_code_and_detail(error, status, code):
    response = exception_handler(error, {})

    assert response.status_code == status
    assert response.data == {"code": code, "detail": error.message}


def test_handler__invalid_input_with_several_problems_lists_them():
    error = pw.InvalidInput(problems=["node 'a': no function", "node 'b': unknown next 'c'"])

    response = exception_handler(error, {})

    assert response.status_code == 400
    assert response.data["problems"] == ["node 'a': no function", "node 'b': unknown next 'c'"]


def test_handler__a_subclass_inherits_its_parents_status():
    class TenantMismatch(pw.InvalidInput):
        code = "TENANT_MISMATCH"

    response = exception_handler(TenantMismatch("not yours"), {})

    assert (response.status_code, response.data["code"]) == (400, "TENANT_MISMATCH")


def test_handler__a_domain_error_design_does_not_map_is_a_server_error_with_its_code(caplog):
    response = exception_handler(pw.WorkflowDispatchException(), {})

    assert response.status_code == 500
    assert response.data["code"] == "DISPATCH_FAILED"
    assert "unmapped DISPATCH_FAILED" in caplog.text


def test_handler__validation_errors_keep_field_detail():
    error = exceptions.ValidationError({"reason": ["Too long."], "input": {"a": ["Bad."]}})

    response = exception_handler(error, {})

    assert response.status_code == 400
    assert response.data == {
        "code": "INVALID_INPUT",
        "detail": "reason: Too long.",
        "fields": {"reason": ["Too long."], "input": {"a": ["Bad."]}},
    }


def test_handler__a_list_of_validation_errors_is_under_non_field_errors():
    response = exception_handler(exceptions.ValidationError(["Name a filter."]), {})

    assert response.data["fields"] == {"non_field_errors": ["Name a filter."]}
    assert response.data["detail"] == "non_field_errors: Name a filter."


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (exceptions.ParseError("JSON parse error - x"), 400, "INVALID_INPUT"),
        (exceptions.NotAuthenticated(), 401, "NOT_AUTHENTICATED"),
        (exceptions.AuthenticationFailed(), 401, "AUTHENTICATION_FAILED"),
        (exceptions.PermissionDenied(), 403, "PERMISSION_DENIED"),
        (exceptions.NotFound(), 404, "NOT_FOUND"),
        (exceptions.MethodNotAllowed("PATCH"), 405, "METHOD_NOT_ALLOWED"),
        (exceptions.UnsupportedMediaType("text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE"),
        (exceptions.Throttled(wait=3), 429, "THROTTLED"),
    ],
)
def test_handler__drf_errors_keep_their_status_and_name_their_code(error, status, code):
    response = exception_handler(error, {})

    assert response.status_code == status
    assert response.data["code"] == code
    assert set(response.data) == {"code", "detail"}


def test_handler__a_value_the_database_refuses_is_invalid_input():
    response = exception_handler(DataError("value out of range"), {})

    assert response.status_code == 400
    assert response.data["code"] == "INVALID_INPUT"


def test_handler__a_body_django_refused_is_payload_too_large_naming_djangos_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = exception_handler(RequestDataTooBig("too big"), {})

    assert response.status_code == 413
    assert response.data == {
        "code": "PAYLOAD_TOO_LARGE",
        "detail": "The request body is over 1000 bytes, the limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
    }


def test_parser__a_body_without_a_declared_length_is_refused_past_the_limit(settings):
    settings.PIKKU_WORKFLOWS = {"MAX_PAYLOAD_BYTES": 10}
    parser = StrictJSONParser()

    assert parser.parse(io.BytesIO(b'"12345678"')) == "12345678"
    with pytest.raises(PayloadTooLarge, match="over 10 bytes"):
        parser.parse(io.BytesIO(b'"123456789"'))


def test_handler__anything_else_is_left_to_django():
    assert exception_handler(RuntimeError("bug"), {}) is None
