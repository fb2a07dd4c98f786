"""OpenTelemetry metrics of committed work (an in-memory reader on the SDK's MeterProvider):
every instrument records what committed, once (a replay records nothing), nothing with `OTEL`
off, and no exported series carries a run id, a key or a tenant."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.observability.instruments import NAMES
from pikku_workflows.testing import drain
from tests.conftest import wait_until
from tests.schedules import make_due, register_report

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

READER = InMemoryMetricReader()
LABELS = {"workflow", "status", "function", "dispatch", "queue"}


@pytest.fixture(autouse=True)
def otel(settings: Any) -> Iterator[None]:
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    settings.PIKKU_WORKFLOWS = {"OTEL": True, "STEP_LEASE_SECONDS": 0.3}
    yield


class ProcessDied(BaseException):
    """Stands for the process dying mid-step: nothing below the step function handles it."""


def register() -> None:
    @pw.step_function("meter_tests.charge")
    def charge(data: Any, ctx: pw.StepContext) -> str:
        if data.get("flaky") and ctx.attempt == 1:
            raise ConnectionError("gateway down")
        if data.get("die") and ctx.attempt == 1:
            raise ProcessDied
        return "charged"

    @pw.step_function("meter_tests.render", inline=False)
    def render(data: Any, ctx: pw.StepContext) -> str:
        return "rendered"

    @pw.workflow("meter_tests.order")
    def order(wf: pw.Workflow, input: Any) -> Any:
        wf.do("charge", "meter_tests.charge", input, retries=1, retry_delay=0)
        if input.get("signal"):
            wf.wait_for_signal("paid", "paid")
        if input.get("render"):
            wf.do("render", "meter_tests.render", {})
        return "done"


def points() -> list[tuple[str, dict[str, Any], Any]]:
    """(instrument, labels, data point) of every series the reader holds (cumulative)."""
    data = READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.append((metric.name, dict(point.attributes), point))
    return found


def value(name: str, **labels: str) -> float:
    """A counter's sum or a histogram's count of the series with exactly `labels`."""
    for instrument, attributes, point in points():
        if instrument == name and attributes == labels:
            return getattr(point, "value", None) or getattr(point, "count", 0)
    return 0


def test_otel_metrics__attempts_runs_and_passes_once_each() -> None:
    register()
    counted = {"workflow": "meter_tests.order", "status": "completed"}
    charges = {"function": "meter_tests.charge", "dispatch": "inline"}
    before = (value("pikku.runs.finished", **counted), value("pikku.step.duration", **charges))
    passes = value("pikku.pass.replay", workflow="meter_tests.order")

    run_id = pw.start_workflow("meter_tests.order", {"flaky": True, "signal": True}, inline=True)
    assert value("pikku.step.duration", **charges) == before[1] + 2  # a failed attempt, a retry
    pw.send_signal(run_id, "paid", {})
    drain(run_id)  # a later pass replays charge from its row

    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    assert value("pikku.step.duration", **charges) == before[1] + 2
    assert value("pikku.runs.finished", **counted) == before[0] + 1
    assert value("pikku.pass.replay", workflow="meter_tests.order") >= passes + 2


def test_otel_metrics__a_queued_start_a_lapsed_lease_and_a_schedule() -> None:
    register()
    register_report()
    queue_waits = sum(p.count for n, _, p in points() if n == "pikku.step.schedule_to_start")
    lapsed = value("pikku.lease.expired")
    fired = value("pikku.schedule.fire_delay")

    drain(pw.start_workflow("meter_tests.order", {"render": True}))
    assert (
        sum(p.count for n, _, p in points() if n == "pikku.step.schedule_to_start")
        == queue_waits + 1
    )

    run_id = pw.start_workflow("meter_tests.order", {"die": True})
    with pytest.raises(ProcessDied):
        tasks.orchestrate(run_id)
    wait_until(
        lambda: WorkflowStep.objects.filter(run_id=run_id).lease_lapsed().exists(),
        what="the dead attempt's lease to lapse",
    )
    tasks.orchestrate(run_id)
    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    assert value("pikku.lease.expired") == lapsed + 1

    pw.create_schedule("meter_minutely", "report", every="1m")
    make_due("meter_minutely")
    assert fire_due_schedules() == 1
    assert value("pikku.schedule.fire_delay") == fired + 1


def test_otel_metrics__no_series_names_a_run_a_key_or_a_tenant() -> None:
    register()
    run_ids = [
        pw.start_workflow("meter_tests.order", {"flaky": True}, idempotency_key="order-7731"),
        pw.start_workflow("meter_tests.order", {"render": True}, idempotency_key="order-7732"),
    ]
    for run_id in run_ids:
        drain(run_id)
    found = points()
    assert {name for name, _, _ in found} >= {
        "pikku.runs.finished",
        "pikku.step.duration",
        "pikku.step.schedule_to_start",
        "pikku.pass.replay",
    }
    assert {name for name, _, _ in found} <= set(NAMES)
    forbidden = {*map(str, run_ids), "order-7731", "order-7732"}
    for name, labels, _ in found:
        assert set(labels) <= LABELS, name
        assert not forbidden & {str(label) for label in labels.values()}, (name, labels)
        assert not any(str(label).count("-") >= 4 for label in labels.values()), (name, labels)


def test_otel_metrics__nothing_when_otel_is_off(settings: Any) -> None:
    settings.PIKKU_WORKFLOWS = {}

    @pw.step_function("meter_tests.quiet_step")
    def quiet_step(data: Any, ctx: pw.StepContext) -> str:
        return "done"

    @pw.workflow("meter_tests.quiet")
    def quiet(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("step", "meter_tests.quiet_step", {})

    run_id = pw.start_workflow("meter_tests.quiet", {}, inline=True)

    assert WorkflowRun.objects.get(pk=run_id).status == "completed"
    assert not [
        (name, labels)
        for name, labels, _ in points()
        if {"meter_tests.quiet", "meter_tests.quiet_step"} & set(labels.values())
    ]
