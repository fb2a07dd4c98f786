"""The permission matrix: anonymous, authenticated without permissions, each permission, the
run's owner against another user, the tenant hook; session (CSRF enforced) and token auth."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun
from tests.api.conftest import API
from tests.rows import load_run

pytestmark = pytest.mark.django_db

OPERATIONS = ("cancel", "suspend", "resume", "retry", "fork")
READS = ("", "timeline/", "state/", "events/")


def run_endpoints(run: WorkflowRun) -> list[tuple[str, str]]:
    """(method, url) of every endpoint under a run."""
    base = f"{API}runs/{run.pk}/"
    return [("get", base + suffix) for suffix in READS] + [
        ("post", f"{base}{operation}/") for operation in OPERATIONS
    ]


def call(api: APIClient, method: str, url: str, body: Any = None) -> Any:
    if method == "get":
        return api.get(url)
    return api.post(url, body or {}, format="json")


def tenant_of_order_runs(request: Any, queryset: Any) -> Any:
    """A host's RUN_QUERYSET_FILTER: this tenant sees runs of one workflow."""
    return queryset.filter(input__tenant=request.user.username)


@pytest.fixture
def alices_run(shop, alice):
    return shop.start(alice, sleep="1h")


@pytest.fixture
def bobs_run(shop, make_user):
    return shop.start(make_user("bob"), sleep="1h")


def test_anonymous__every_endpoint_is_not_authenticated(shop, alices_run):
    anonymous = APIClient()
    endpoints = [
        ("get", API + "definitions/"),
        ("get", API + "definitions/api_tests.order/"),
        ("post", API + "definitions/api_tests.order/runs/"),
        ("get", API + "runs/"),
        ("get", API + "runs/counts/"),
        ("post", API + "runs/bulk/cancel/"),
        *run_endpoints(alices_run),
    ]

    for method, url in endpoints:
        response = call(anonymous, method, url)
        # The demo's first authentication class is the session's, which sends no challenge.
        assert response.status_code == 403, url
        assert response.json()["code"] == "NOT_AUTHENTICATED", url
    assert WorkflowRun.objects.count() == 1


def test_no_permissions__sees_definitions_and_own_runs_only(
    shop, alice, client_for, alices_run, bobs_run
):
    api = client_for(alice)

    assert api.get(API + "definitions/").status_code == 200
    assert [item["id"] for item in api.get(API + "runs/").json()["results"]] == [str(alices_run.pk)]
    assert api.get(API + "runs/counts/").json()["total"] == 1
    for suffix in ("", "timeline/", "state/"):
        assert api.get(f"{API}runs/{alices_run.pk}/{suffix}").status_code == 200


def test_no_permissions__another_users_run_is_not_found_on_every_endpoint(
    alice, client_for, bobs_run
):
    api = client_for(alice)

    for method, url in run_endpoints(bobs_run):
        response = call(api, method, url, {"from_step": "charge"})
        assert response.status_code == 404, url
        assert response.json()["code"] == "RUN_NOT_FOUND", url
    assert load_run(bobs_run.pk).status == "running"


def test_no_permissions__cannot_start_operate_or_bulk_and_nothing_changes(
    shop, alice, client_for, alices_run
):
    api = client_for(alice)

    started = api.post(API + "definitions/api_tests.order/runs/", {}, format="json")
    operated = [
        call(api, "post", url, {"from_step": "charge"}) for _, url in run_endpoints(alices_run)[4:]
    ]
    bulk = api.post(API + "runs/bulk/cancel/", {"status": "running"}, format="json")

    for response in [started, *operated, bulk]:
        assert response.status_code == 403
        assert response.json()["code"] == "PERMISSION_DENIED"
    assert WorkflowRun.objects.count() == 1
    assert load_run(alices_run.pk).status == "running"
    assert not WorkflowAuditEntry.objects.exists()


def test_add_permission__starts_runs_that_its_holder_then_sees(shop, make_user, client_for):
    api = client_for(make_user("starter", "add_workflowrun"))

    response = api.post(API + "definitions/api_tests.order/runs/", {}, format="json")

    assert response.status_code == 201
    assert api.get(f"{API}runs/{response.json()['id']}/").status_code == 200


@pytest.mark.parametrize("granted", OPERATIONS)
def test_each_operation_permission__allows_that_operation_only(
    shop, make_user, client_for, granted
):
    user = make_user(f"only-{granted}", f"{granted}_workflowrun")
    api = client_for(user)
    runs = {
        "cancel": shop.start(user, sleep="1h"),
        "suspend": shop.start(user, sleep="1h"),
        "resume": shop.start(user, review=True),
        "retry": shop.failed(user),
        "fork": shop.start(user),
    }

    for operation, run in runs.items():
        body = {"from_step": "charge"} if operation == "fork" else {}
        response = api.post(f"{API}runs/{run.pk}/{operation}/", body, format="json")
        assert response.status_code == (200 if operation == granted else 403), operation
    assert set(WorkflowAuditEntry.objects.values_list("action", flat=True)) == {granted}
    bulk = api.post(API + "runs/bulk/cancel/", {"status": "running"}, format="json")
    assert bulk.status_code == (200 if granted == "cancel" else 403)


def test_operation_permission_without_view__another_users_run_stays_not_found(
    make_user, client_for, bobs_run
):
    api = client_for(make_user("canceller", "cancel_workflowrun"))

    response = api.post(f"{API}runs/{bobs_run.pk}/cancel/", format="json")
    bulk = api.post(API + "runs/bulk/cancel/", {"status": "running"}, format="json")

    assert response.status_code == 404
    assert bulk.json()["eligible_count"] == 0  # bulk sees only the runs you may see
    assert load_run(bobs_run.pk).status == "running"


def test_view_permission__sees_every_run_but_cannot_operate(
    make_user, client_for, alices_run, bobs_run
):
    api = client_for(make_user("auditor", "view_workflowrun"))

    listed = {item["id"] for item in api.get(API + "runs/").json()["results"]}
    response = api.post(f"{API}runs/{bobs_run.pk}/cancel/", format="json")

    assert listed == {str(alices_run.pk), str(bobs_run.pk)}
    assert api.get(f"{API}runs/{bobs_run.pk}/").status_code == 200
    assert response.status_code == 403
    assert load_run(bobs_run.pk).status == "running"


def test_superuser__sees_and_operates_every_run(make_user, client_for, bobs_run):
    api = client_for(make_user("root", is_superuser=True))

    assert api.post(f"{API}runs/{bobs_run.pk}/cancel/", format="json").status_code == 200


def test_tenant_hook__narrows_even_a_view_permission_everywhere(
    shop, operator, operator_api, settings
):
    settings.PIKKU_WORKFLOWS = {"RUN_QUERYSET_FILTER": f"{__name__}.tenant_of_order_runs"}
    own = shop.start(operator, tenant="operator", sleep="1h")
    other = shop.start(operator, tenant="someone-else", sleep="1h")

    listed = {item["id"] for item in operator_api.get(API + "runs/").json()["results"]}
    counted = operator_api.get(API + "runs/counts/").json()["total"]
    bulk = operator_api.post(
        API + "runs/bulk/cancel/", {"status": "running", "dry_run": True}, format="json"
    )

    assert listed == {str(own.pk)}
    assert counted == 1
    assert bulk.json()["eligible"] == [str(own.pk)]
    for method, url in run_endpoints(other):
        assert call(operator_api, method, url, {"from_step": "charge"}).status_code == 404, url
    assert operator_api.get(f"{API}runs/{own.pk}/").status_code == 200


def test_tenant_hook__may_be_a_callable(shop, operator, operator_api, settings):
    settings.PIKKU_WORKFLOWS = {"RUN_QUERYSET_FILTER": lambda request, runs: runs.none()}
    run = shop.start(operator)

    assert operator_api.get(f"{API}runs/{run.pk}/").status_code == 404


def test_session_auth__enforces_csrf_on_writes(shop, operator, alices_run):
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(operator)

    read = api.get(f"{API}runs/{alices_run.pk}/")
    forged = api.post(f"{API}runs/{alices_run.pk}/cancel/", format="json")
    token = read.cookies.get("csrftoken") or api.get("/admin/login/").cookies["csrftoken"]
    api.cookies["csrftoken"] = token.value
    genuine = api.post(
        f"{API}runs/{alices_run.pk}/cancel/", format="json", HTTP_X_CSRFTOKEN=token.value
    )

    assert read.status_code == 200
    assert forged.status_code == 403
    assert forged.json()["code"] == "PERMISSION_DENIED"
    assert "CSRF" in forged.json()["detail"]
    assert genuine.status_code == 200
    assert load_run(alices_run.pk).status == "cancelled"


def test_token_auth__works_without_csrf(shop, operator, alices_run):
    token = Token.objects.create(user=operator)
    api = APIClient(enforce_csrf_checks=True)

    response = api.post(
        f"{API}runs/{alices_run.pk}/cancel/", format="json", HTTP_AUTHORIZATION=f"Token {token.key}"
    )
    bad = api.get(API + "runs/", HTTP_AUTHORIZATION="Token not-a-token")

    assert response.status_code == 200
    # 403, not 401: DRF answers with the challenge of the first authentication class (session).
    assert bad.status_code == 403
    assert bad.json() == {"code": "AUTHENTICATION_FAILED", "detail": "Invalid token."}
