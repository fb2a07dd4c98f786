"""`GET metrics/`: who may scrape it, what its gauges say of reachable states, that no label
names a run, a key or a tenant, and the cache between scrapes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowStep
from pikku_workflows.observability.gauges import GAUGES
from pikku_workflows.tasks import orchestrate
from tests.api.conftest import API
from tests.shop import Shop

pytestmark = pytest.mark.django_db

METRICS = f"{API}metrics/"
TOKEN = "s3cret-scraper-token"
LABEL_NAMES = {"workflow", "status", "kind", "queue", "cluster"}


@pytest.fixture(autouse=True)
def uncached(settings: Any) -> None:
    settings.PIKKU_WORKFLOWS = {"METRICS_TOKEN": TOKEN, "METRICS_CACHE_SECONDS": 0}


def scrape(api: APIClient | None = None) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every exported sample as (name, labels) -> value."""
    response = (api or APIClient()).get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_metrics__scraper_token_or_staff(make_user: Any, client_for: Any) -> None:
    assert scrape()
    staff = client_for(make_user("ops", is_staff=True))
    assert staff.get(METRICS).status_code == 200


@pytest.mark.parametrize(
    ("authorization", "expected"),
    [(None, 401), ("Bearer wrong-token", 401), (f"Token {TOKEN}", 401), (f"Basic {TOKEN}", 401)],
)
def test_metrics__refused_without_the_token(authorization: str | None, expected: int) -> None:
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = APIClient().get(METRICS, **headers)
    assert response.status_code == expected
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"pikku_runs" not in response.content


def test_metrics__refused_to_users_who_are_not_staff(make_user: Any, client_for: Any) -> None:
    viewer = client_for(make_user("viewer", "view_workflowrun"))
    response = viewer.get(METRICS)
    assert response.status_code == 403
    assert response.json()["code"] == "PERMISSION_DENIED"


def test_metrics__no_token_configured_refuses_every_bearer(settings: Any) -> None:
    settings.PIKKU_WORKFLOWS = {}
    response = APIClient().get(METRICS, HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


def test_metrics__runs_by_status_and_waiting_kind(shop: Shop) -> None:
    shop.start()
    shop.failed()
    shop.start(review=True)
    shop.awaiting(approvers=["boss"])
    samples = scrape()
    workflow = shop.workflow
    assert sample(samples, "pikku_runs", workflow=workflow, status="completed") == 1
    assert sample(samples, "pikku_runs", workflow=workflow, status="failed") == 1
    assert sample(samples, "pikku_runs", workflow=workflow, status="suspended") == 1
    assert sample(samples, "pikku_runs", workflow=workflow, status="running") == 1
    assert sample(samples, "pikku_runs_waiting", workflow=workflow, kind="suspend") == 1
    assert sample(samples, "pikku_runs_waiting", workflow=workflow, kind="approval") == 1
    assert sample(samples, "pikku_approvals_pending", workflow=workflow) == 1


def test_metrics__oldest_pending_approval_age(shop: Shop) -> None:
    approval = shop.awaiting(approvers=["boss"])
    type(approval).objects.filter(pk=approval.pk).update(
        created_at=timezone.now() - timedelta(hours=2)
    )
    age = sample(scrape(), "pikku_approvals_oldest_pending_age_seconds", workflow=shop.workflow)
    assert age is not None and 2 * 3600 <= age < 3 * 3600


def test_metrics__queue_lag_of_queued_steps() -> None:
    @pw.step_function("metrics_tests.render", inline=False, queue="renderers")
    def render(data: Any, ctx: pw.StepContext) -> str:
        return "done"

    @pw.workflow("metrics_tests.report")
    def report(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("render", "metrics_tests.render", {})

    idle = scrape()
    assert sample(idle, "pikku_queue_runnable_steps", queue="renderers") == 0
    assert sample(idle, "pikku_queue_oldest_runnable_age_seconds", queue="renderers") == 0

    run_id = pw.start_workflow("metrics_tests.report", {})
    orchestrate(str(run_id))
    WorkflowStep.objects.filter(run_id=run_id).update(
        updated_at=timezone.now() - timedelta(minutes=10)
    )
    samples = scrape()
    assert sample(samples, "pikku_queue_runnable_steps", queue="renderers") == 1
    lag = sample(samples, "pikku_queue_oldest_runnable_age_seconds", queue="renderers")
    assert lag is not None and 600 <= lag < 700

    pw.suspend_run(run_id, reason="not now")
    assert sample(scrape(), "pikku_queue_runnable_steps", queue="renderers") == 0


def test_metrics__no_label_names_a_run_a_key_or_a_tenant(shop: Shop) -> None:
    tenant = "tenant-acme-0001"
    key = "order-key-7f3a"
    run_id = pw.start_workflow(shop.workflow, {"tenant": tenant}, idempotency_key=key, inline=True)
    shop.awaiting(approvers=["boss"], input={"tenant": tenant})
    shop.failed(tenant=tenant)
    secrets = {
        tenant,
        key,
        str(run_id),
        *map(str, WorkflowRun.objects.values_list("pk", flat=True)),
    }
    samples = scrape()
    assert samples
    for name, labels in samples:
        assert name in GAUGES
        for label, value in labels:
            assert label in LABEL_NAMES, (name, label)
            assert not any(secret in value for secret in secrets), (name, label, value)


def test_metrics__every_gauge_is_exported_with_its_help() -> None:
    response = APIClient().get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    families = {
        family.name: family for family in text_string_to_metric_families(response.content.decode())
    }
    for name, documentation in GAUGES.items():
        assert families[name].type == "gauge"
        assert families[name].documentation == documentation


def test_metrics__cached_between_scrapes(settings: Any, shop: Shop) -> None:
    settings.PIKKU_WORKFLOWS = {"METRICS_TOKEN": TOKEN, "METRICS_CACHE_SECONDS": 60}
    shop.start()
    first = scrape()
    shop.start()
    assert scrape() == first
    settings.PIKKU_WORKFLOWS = {"METRICS_TOKEN": TOKEN, "METRICS_CACHE_SECONDS": 0}
    assert sample(scrape(), "pikku_runs", workflow=shop.workflow, status="completed") == 2


def test_metrics__concurrency_slots_in_use_by_workflow_never_by_key() -> None:
    @pw.workflow("metrics_tests.sync", concurrency=pw.Concurrency(key="customer-7", max_active=1))
    def sync(wf: pw.Workflow, input: Any) -> None:
        wf.sleep("wait", "1h")

    held = pw.start_workflow("metrics_tests.sync", {})
    queued = pw.start_workflow("metrics_tests.sync", {})
    orchestrate(held)

    samples = scrape()
    assert sample(samples, "pikku_slots_in_use", workflow="metrics_tests.sync") == 1
    assert WorkflowRun.objects.get(pk=queued).status == "queued"
    assert not any("customer-7" in str(labels) for _, labels in samples)


def test_metrics__schedule_lag_of_the_most_overdue_unpaused_schedule(shop: Shop) -> None:
    pw.create_schedule("hourly", shop.workflow, every="1h")
    pw.create_schedule("paused", shop.workflow, every="1h", paused=True)
    two_hours_ago = timezone.now() - timedelta(hours=2)
    WorkflowSchedule.objects.update(next_fire_at=two_hours_ago)

    lag = sample(scrape(), "pikku_schedule_lag_seconds", workflow=shop.workflow)

    assert lag is not None and 2 * 3600 <= lag < 3 * 3600
