"""Definitions (list, detail) and starting runs: queued, started_by, idempotency, bad input."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from tests.api.conftest import API

pytestmark = pytest.mark.django_db

START = API + "definitions/api_tests.order/runs/"


def post_json(api, url, body: bytes | str):
    return api.post(url, body, content_type="application/json")


def test_definitions__list_every_registered_workflow_with_kind_hash_and_planned_steps(
    shop, operator_api
):
    response = operator_api.get(API + "definitions/")

    assert response.status_code == 200
    listed = {item["name"]: item for item in response.json()}
    assert set(listed) == set(registry.workflows)
    definition = registry.get_workflow("api_tests.order")
    assert listed["api_tests.order"] == {
        "name": "api_tests.order",
        "kind": "dsl",
        "version_hash": definition.code_version,
        "planned_steps": ["reserve", "charge", "ship"],
    }


def test_definitions__detail_adds_the_definition_document(shop, operator_api):
    response = operator_api.get(API + "definitions/api_tests.order/")

    assert response.status_code == 200
    assert response.json()["definition"] is None  # a Python workflow has no document
    assert response.json()["version_hash"] == registry.get_workflow("api_tests.order").code_version


def test_definitions__a_graph_workflow_shows_its_definition_and_hash(operator_api):
    source = {
        "entry": ["validate"],
        "nodes": {
            "validate": {"function": "users.validate", "next": "welcome"},
            "welcome": {"function": "mail.std"},
        },
    }
    graph = pw.graph_workflow("api_tests.onboarding", source)

    response = operator_api.get(API + "definitions/api_tests.onboarding/")

    assert response.status_code == 200
    body = response.json()
    assert (body["kind"], body["version_hash"]) == ("graph", graph.hash)
    assert body["definition"] == graph.source


def test_definitions__unknown_name_is_workflow_not_found(operator_api):
    response = operator_api.get(API + "definitions/no.such.workflow/")

    assert response.status_code == 404
    assert response.json()["code"] == "WORKFLOW_NOT_FOUND"


def test_start__queues_a_run_started_by_the_requester_that_a_worker_completes(
    shop, operator, operator_api, worker
):
    response = worker(lambda: operator_api.post(START, {"input": {"amount": 3}}, format="json"))

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "running"  # queued: the request ran no step
    assert body["steps"] == []
    assert body["started_by"] == "operator"
    assert response["Location"].endswith(f"/api/workflows/runs/{body['id']}/")
    run = WorkflowRun.objects.get(pk=body["id"])
    assert run.started_by == operator
    assert not run.inline
    assert pw.get_run_status(run.pk)["status"] == "completed"
    assert pw.get_run_status(run.pk)["output"] == {"charge": {"charged": 3}, "ship": "shipped"}


def test_start__answers_the_status_summary(shop, operator_api):
    response = operator_api.post(START, {"input": {}}, format="json")

    assert response.json() == pw.get_run_status(response.json()["id"])


def test_start__without_input_starts_with_null(shop, operator_api):
    response = operator_api.post(START, {}, format="json")

    assert response.status_code == 201
    assert WorkflowRun.objects.get(pk=response.json()["id"]).input is None


def test_start__same_idempotency_key_answers_the_same_run_with_200(shop, operator_api):
    body = {"input": {"amount": 1}, "idempotency_key": "order-7"}
    first = operator_api.post(START, body, format="json")
    again = operator_api.post(START, body, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert WorkflowRun.objects.filter(idempotency_key="order-7").count() == 1


def test_start__same_idempotency_key_with_another_input_is_a_conflict(shop, operator_api):
    operator_api.post(START, {"input": {"amount": 1}, "idempotency_key": "k"}, format="json")
    response = operator_api.post(
        START, {"input": {"amount": 2}, "idempotency_key": "k"}, format="json"
    )

    assert response.status_code == 409
    assert response.json()["code"] == "IDEMPOTENCY_CONFLICT"


def test_start__idempotency_key_of_a_run_someone_else_started_does_not_show_it(
    shop, make_user, client_for
):
    bob = client_for(make_user("bob", "add_workflowrun"))
    carol = client_for(make_user("carol", "add_workflowrun"))
    body = {"input": {"amount": 1}, "idempotency_key": "shared"}
    bobs = bob.post(START, body, format="json")

    response = carol.post(START, body, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert bobs.json()["id"] not in json.dumps(response.json())


def tenant_of(request):
    """A host's IDEMPOTENCY_SCOPE: the tenant is the user's last name."""
    return request.user.last_name


def runs_of_tenant(request, runs):
    """A host's RUN_QUERYSET_FILTER: a tenant sees the runs its users started."""
    return runs.filter(started_by__last_name=request.user.last_name)


def test_start__tenants_keys_never_meet_so_another_tenants_key_is_not_shown(
    shop, make_user, client_for, settings
):
    settings.PIKKU_WORKFLOWS = {
        "RUN_QUERYSET_FILTER": f"{__name__}.runs_of_tenant",
        "IDEMPOTENCY_SCOPE": f"{__name__}.tenant_of",
    }
    acme = client_for(make_user("a", "add_workflowrun", "view_workflowrun", last_name="acme"))
    globex = client_for(make_user("g", "add_workflowrun", "view_workflowrun", last_name="globex"))
    body = {"input": {"amount": 1}, "idempotency_key": "order-7"}
    acmes = acme.post(START, body, format="json")

    # Acme's key and input from globex: globex's own run, where a 409 would show acme's key.
    globexs = globex.post(START, body, format="json")
    conflict = globex.post(START, {**body, "input": {"amount": 2}}, format="json")
    acme_again = acme.post(START, body, format="json")

    assert (acmes.status_code, globexs.status_code) == (201, 201)
    assert globexs.json()["id"] != acmes.json()["id"]
    assert conflict.status_code == 409  # within its own scope, the key is globex's
    assert (acme_again.status_code, acme_again.json()["id"]) == (200, acmes.json()["id"])
    assert WorkflowRun.objects.get(pk=globexs.json()["id"]).idempotency_scope == "globex"
    assert WorkflowRun.objects.get(pk=acmes.json()["id"]).idempotency_scope == "acme"


def test_start__a_scope_hook_that_answers_no_text_is_a_configuration_error(
    shop, operator_api, settings
):
    settings.PIKKU_WORKFLOWS = {"IDEMPOTENCY_SCOPE": lambda request: None}

    with pytest.raises(ImproperlyConfigured, match="IDEMPOTENCY_SCOPE must return a string"):
        operator_api.post(START, {"input": {}, "idempotency_key": "k"}, format="json")

    assert not WorkflowRun.objects.exists()


def test_start__unknown_workflow_is_workflow_not_found(operator_api):
    response = operator_api.post(API + "definitions/nope/runs/", {}, format="json")

    assert response.status_code == 404
    assert response.json() == {
        "code": "WORKFLOW_NOT_FOUND",
        "detail": "No workflow is registered under the name 'nope'.",
    }
    assert not WorkflowRun.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"input": ',  # malformed
        b"not json",
        b'{"input": NaN}',
        b'{"input": Infinity}',
        b'{"input": 1e999}',  # parses as infinity
        b'{"input": "\\ud800"}',  # a lone surrogate: not encodable as UTF-8
        b'{"\\udfff": 1}',
        b"[" * 300 + b"]" * 300,  # nested deeper than the parser allows
        b"[" * 100_000 + b"]" * 100_000,  # deeper than Python's recursion limit
        b'{"input": 1' + b"0" * 5000 + b"}",  # more digits than Python converts
        '{"input": "caf\xe9"}'.encode("latin-1"),  # not UTF-8
    ],
)
def test_start__malformed_json_is_invalid_input_and_starts_nothing(shop, operator_api, body):
    response = post_json(operator_api, START, body)

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert response.json()["detail"].startswith("JSON parse error")
    assert not WorkflowRun.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([1, 2], "non_field_errors"),
        ("just a string", "non_field_errors"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "k" * 256}, "idempotency_key"),
        ({"idempotency_key": {"a": 1}}, "idempotency_key"),
        ({"idempotency_key": "a\x00b"}, "idempotency_key"),
    ],
)
def test_start__invalid_fields_keep_drf_field_detail(shop, operator_api, body, field):
    response = operator_api.post(START, body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert field in response.json()["fields"]
    assert response.json()["detail"].startswith(f"{field}: ")
    assert not WorkflowRun.objects.exists()


def test_start__input_the_database_cannot_store_is_invalid_input(shop, operator_api):
    response = operator_api.post(START, {"input": {"note": "a\x00b"}}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert not WorkflowRun.objects.exists()


def test_start__an_input_over_djangos_upload_limit_within_max_payload_bytes_is_accepted(
    shop, operator_api, settings
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # the API reads its bodies to its own limit

    response = operator_api.post(START, {"input": "x" * 2000}, format="json")

    assert response.status_code == 201, response.json()
    assert WorkflowRun.objects.get().input == "x" * 2000


@pytest.mark.parametrize("url", [START, f"{API}runs/bulk/cancel/"])
def test_start__a_body_over_max_payload_bytes_is_payload_too_large_naming_the_limit(
    shop, operator_api, settings, url
):
    settings.PIKKU_WORKFLOWS = {"MAX_PAYLOAD_BYTES": 1000}

    response = operator_api.post(url, {"input": "x" * 1000}, format="json")

    assert response.status_code == 413
    assert response.json() == {
        "code": "PAYLOAD_TOO_LARGE",
        "detail": "The request body is over 1000 bytes, the limit (MAX_PAYLOAD_BYTES).",
    }
    assert not WorkflowRun.objects.exists()
    assert operator_api.post(START, {"input": "x" * 900}, format="json").status_code == 201


def test_start__form_encoded_body_is_unsupported_media_type(shop, operator_api):
    response = operator_api.post(START, {"input": "x"})  # multipart

    assert response.status_code == 415
    assert response.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
