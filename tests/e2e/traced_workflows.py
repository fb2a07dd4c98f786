"""Workflows the tracing end-to-end test runs on a real `pikku_worker`, and the exporter its
processes write their spans with: one JSON line per span appended to the file named by
`PIKKU_TEST_SPANS_FILE` (an in-memory exporter cannot be read from another process)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pikku_workflows as pw

SPANS_FILE = "PIKKU_TEST_SPANS_FILE"


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_line(span)) + "\n")
        return SpanExportResult.SUCCESS


def span_line(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "error": not span.status.is_ok,
        "end_time": span.end_time,
        "pid": os.getpid(),
    }


if os.environ.get(SPANS_FILE):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(os.environ[SPANS_FILE])))
    trace.set_tracer_provider(provider)


@pw.step_function("traced.charge")
def charge(data: Any, ctx: pw.StepContext) -> str:
    return "charged"


@pw.step_function("traced.render", inline=False)
def render(data: Any, ctx: pw.StepContext) -> str:
    return "rendered"


@pw.workflow("traced.invoice")
def invoice(wf: pw.Workflow, input: Any) -> Any:
    return wf.do("render", "traced.render", {})


@pw.workflow("traced.order")
def order(wf: pw.Workflow, input: Any) -> Any:
    wf.do("charge", "traced.charge", {})
    wf.do("render", "traced.render", {})
    return wf.do("invoice", "traced.invoice", {})


@pw.step_function("traced.slow", inline=False)
def slow(data: Any, ctx: pw.StepContext) -> int:
    """Sleeps inside its body, a file named by its process saying since when (a test kills the
    worker while every process is in here, far from any commit or export)."""
    inside = Path(data["inside"]) / str(os.getpid())
    inside.write_text(str(time.time()))
    time.sleep(data["seconds"])
    inside.unlink(missing_ok=True)
    return ctx.attempt


@pw.workflow("traced.chaos")
def chaos(wf: pw.Workflow, input: Any) -> Any:
    wf.do("charge", "traced.charge", {})
    for number in range(input["steps"]):
        wf.do(f"slow-{number}", "traced.slow", {k: input[k] for k in ("inside", "seconds")})
    return wf.do("invoice", "traced.invoice", {})
