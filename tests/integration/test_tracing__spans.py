"""Traces of committed work (an in-memory exporter on the SDK's provider): one span per ended
attempt and one per ended run, ids derived from (run, step key, attempt), nothing from a
replay; a child run and a queued step in the trace of the HTTP request that started the run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rest_framework.test import APIClient

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStepHistory
from pikku_workflows.observability.tracing import attempt_span_id, run_span_id
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

EXPORTER = InMemorySpanExporter()
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(autouse=True)
def tracing(settings: Any) -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    settings.PIKKU_WORKFLOWS = {"OTEL": True}
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def register() -> None:
    @pw.step_function("trace_tests.charge")
    def charge(data: Any, ctx: pw.StepContext) -> str:
        if data.get("flaky") and ctx.attempt == 1:
            raise ConnectionError("gateway down")
        return "charged"

    @pw.step_function("trace_tests.render", inline=False)
    def render(data: Any, ctx: pw.StepContext) -> str:
        return "rendered"

    @pw.workflow("trace_tests.invoice")
    def invoice(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("render", "trace_tests.render", {})

    @pw.workflow("trace_tests.order")
    def order(wf: pw.Workflow, input: Any) -> Any:
        wf.do(
            "charge", "trace_tests.charge", {"flaky": input.get("flaky")}, retries=1, retry_delay=0
        )
        if input.get("signal"):
            wf.wait_for_signal("paid", "paid")
        if input.get("invoice"):
            wf.do("invoice", "trace_tests.invoice", {})
        return "done"


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def ended_attempts() -> int:
    return WorkflowStepHistory.objects.exclude(succeeded_at=None, failed_at=None).count()


def test_tracing__a_span_per_attempt_and_per_run(tracing: InMemorySpanExporter) -> None:
    register()
    run_id = pw.start_workflow("trace_tests.order", {"flaky": True}, inline=True)
    spans = spans_by_name(tracing)
    trace_id = uuid.UUID(run_id).int
    (run_span,) = spans["workflow trace_tests.order"]
    assert run_span.parent is None
    assert (run_span.context.trace_id, run_span.context.span_id) == (trace_id, run_span_id(run_id))
    failed, succeeded = sorted(spans["step charge"], key=lambda s: s.attributes["pikku.attempt"])
    for attempt, span in ((1, failed), (2, succeeded)):
        assert span.context.trace_id == trace_id
        assert span.context.span_id == attempt_span_id(run_id, "charge", attempt)
        assert span.parent.span_id == run_span_id(run_id)
        assert span.attributes["pikku.workflow"] == "trace_tests.order"
        assert span.start_time <= span.end_time
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.attributes["error.type"]
    assert succeeded.status.status_code == trace.StatusCode.UNSET
    assert run_span.start_time <= failed.start_time and succeeded.end_time <= run_span.end_time


def test_tracing__replays_emit_nothing(tracing: InMemorySpanExporter) -> None:
    register()
    run_id = pw.start_workflow("trace_tests.order", {"signal": True})
    drain(run_id)
    before = [span.name for span in tracing.get_finished_spans()]
    assert before == ["step charge"]  # the run waits for its signal: no run span yet
    pw.send_signal(run_id, "paid", {"ok": True})
    drain(run_id)  # a second pass replays charge from its row
    spans = tracing.get_finished_spans()
    ids = [span.context.span_id for span in spans]
    assert len(ids) == len(set(ids)) == ended_attempts() + 1
    assert sorted(span.name for span in spans) == [
        "step charge",
        "step paid",
        "workflow trace_tests.order",
    ]
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_tracing__one_trace_from_the_request_through_a_queued_step_and_a_child(
    tracing: InMemorySpanExporter, django_user_model: Any
) -> None:
    register()
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "x")
    api = APIClient()
    api.force_authenticate(user)
    response = api.post(
        "/api/workflows/definitions/trace_tests.order/runs/",
        {"input": {"invoice": True}},
        format="json",
        HTTP_TRACEPARENT=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    drain(run_id)
    run = WorkflowRun.objects.get(pk=run_id)
    child = WorkflowRun.objects.get(parent_run_id=run_id)
    assert (run.status, child.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)

    spans = spans_by_name(tracing)
    assert {span.context.trace_id for spans_ in spans.values() for span in spans_} == {
        int(CALLER_TRACE, 16)
    }
    (run_span,) = spans["workflow trace_tests.order"]
    assert run_span.parent.span_id == int(CALLER_SPAN, 16)
    (invoice_step,) = spans["step invoice"]
    (child_span,) = spans["workflow trace_tests.invoice"]
    assert child_span.parent.span_id == invoice_step.context.span_id
    (render,) = spans["step render"]
    assert render.parent.span_id == child_span.context.span_id
    assert render.attributes["pikku.dispatch"] in ("queued", "in_place")
    ids = [span.context.span_id for spans_ in spans.values() for span in spans_]
    assert len(ids) == len(set(ids)) == ended_attempts() + 2


def test_tracing__off_unless_asked(settings: Any, tracing: InMemorySpanExporter) -> None:
    settings.PIKKU_WORKFLOWS = {}
    register()
    run_id = pw.start_workflow("trace_tests.order", {}, inline=True)
    assert tracing.get_finished_spans() == ()
    assert WorkflowRun.objects.get(pk=run_id).traceparent is None
