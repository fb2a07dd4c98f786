"""Traces of committed work through OpenTelemetry (`OTEL`, the `[otel]` extra): spans built from
rows after they commit, with ids derived from (run, step key, attempt), so a replay emits
nothing and a crash loses no span of committed work. A step attempt's span is exported once
its outcome commits, a run's span once the run ends. A run's `traceparent` (its caller's at
start, or its parent's step attempt for a child run) puts its spans in the caller's trace.

Spans go to the span processors of the global SDK TracerProvider the host configures (with
the exporter of its choice: OTLP, console, in-memory)."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import transaction

from ..conf import pikku_settings

logger = logging.getLogger(__name__)

TRACER_NAME = "pikku_workflows"


def tracing_on() -> bool:
    """`OTEL` is true and the OpenTelemetry SDK is installed."""
    if not pikku_settings.OTEL:
        return False
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _span_id(*parts: Any) -> int:
    digest = hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1  # 0 is no span id


def run_span_id(run_id: Any) -> int:
    return _span_id(run_id, "run")


def attempt_span_id(run_id: Any, step_key: str, attempt: int) -> int:
    return _span_id(run_id, step_key, attempt)


def parse_traceparent(traceparent: str | None) -> tuple[int, int] | None:
    """(trace id, parent span id) of a W3C `traceparent`, or None when it is not one."""
    parts = (traceparent or "").split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None


def format_traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def trace_id_of(run_id: Any, traceparent: str | None) -> int:
    """The run's trace: its traceparent's, else one of its own (its id's 128 bits)."""
    parsed = parse_traceparent(traceparent)
    return parsed[0] if parsed else uuid.UUID(str(run_id)).int


def caller_traceparent() -> str | None:
    """The current OpenTelemetry context as a traceparent (None: tracing off, or no span)."""
    if not tracing_on():
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def child_traceparent(run: Any, step_key: str, attempt: int) -> str | None:
    """A child run's traceparent: under the span of the parent's step attempt that starts it."""
    if not tracing_on():
        return None
    trace_id = trace_id_of(run.pk, run.traceparent)
    return format_traceparent(trace_id, attempt_span_id(run.pk, step_key, attempt))


@contextmanager
def caller_context(traceparent: str | None) -> Iterator[None]:
    """Inside, the current context is the caller's `traceparent` (an HTTP header), unless a
    span is already current (the host's own instrumentation read it)."""
    if not tracing_on() or parse_traceparent(traceparent) is None:
        yield
        return
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)


def export_attempt_after_commit(step_id: Any, attempt: int) -> None:
    """Once the write that ended this attempt commits, export its span (read from the rows)."""
    if tracing_on():
        transaction.on_commit(lambda: _exported(_attempt_span, step_id, attempt))


def export_run_after_commit(run_id: Any) -> None:
    """Once the write that ended the run commits, export its span."""
    if tracing_on():
        transaction.on_commit(lambda: _exported(_run_span, run_id))


def _exported(build: Any, *args: Any) -> None:
    # A tracing backend's trouble must never fail a run or a pass: the span is lost, said once.
    try:
        span = build(*args)
        processor = _span_processor()
        if span is not None and processor is not None:
            processor.on_end(span)
    except Exception:
        logger.warning("pikku_workflows: a span could not be exported", exc_info=True)


def _span_processor() -> Any:
    from opentelemetry import trace

    # The SDK's provider hands ended spans to its processors (their exporters) this way; the
    # API's no-op provider has none.
    return getattr(trace.get_tracer_provider(), "_active_span_processor", None)


def _nanoseconds(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1_000_000_000)


def _attempt_span(step_id: Any, attempt: int) -> Any:
    from ..models import WorkflowStepHistory

    row = (
        WorkflowStepHistory.objects.filter(step_id=step_id, attempt=attempt)
        .values(
            "status",
            "dispatch",
            "worker",
            "error",
            "created_at",
            "running_at",
            "succeeded_at",
            "failed_at",
            "step__step_key",
            "step__function_name",
            "step__kind",
            "step__run_id",
            "step__run__workflow",
            "step__run__traceparent",
        )
        .first()
    )
    if row is None:
        return None
    run_id, step_key = row["step__run_id"], row["step__step_key"]
    trace_id = trace_id_of(run_id, row["step__run__traceparent"])
    attributes = {
        "pikku.run_id": str(run_id),
        "pikku.workflow": row["step__run__workflow"],
        "pikku.step_key": step_key,
        "pikku.step_kind": row["step__kind"],
        "pikku.attempt": attempt,
        "code.function.name": row["step__function_name"] or "",
        "pikku.dispatch": row["dispatch"] or "",
    }
    if row["worker"]:
        attributes["host.name"] = row["worker"].rpartition(":")[0]
    return _span(
        f"step {step_key}",
        trace_id,
        attempt_span_id(run_id, step_key, attempt),
        run_span_id(run_id),
        start=row["running_at"] or row["created_at"],
        end=row["succeeded_at"] or row["failed_at"],
        attributes=attributes,
        error=row["error"],
    )


def _run_span(run_id: Any) -> Any:
    from ..models import WorkflowRun

    row = (
        WorkflowRun.objects.filter(pk=run_id)
        .values("workflow", "status", "error", "traceparent", "created_at", "finished_at")
        .first()
    )
    if row is None:
        return None
    parsed = parse_traceparent(row["traceparent"])
    attributes = {
        "pikku.run_id": str(run_id),
        "pikku.workflow": row["workflow"],
        "pikku.run_status": row["status"],
    }
    return _span(
        f"workflow {row['workflow']}",
        trace_id_of(run_id, row["traceparent"]),
        run_span_id(run_id),
        parsed[1] if parsed else None,
        start=row["created_at"],
        end=row["finished_at"],
        attributes=attributes,
        error=row["error"] if row["status"] == "failed" else None,
    )


def _span(
    name: str,
    trace_id: int,
    span_id: int,
    parent_span_id: int | None,
    *,
    start: datetime | None,
    end: datetime | None,
    attributes: dict[str, Any],
    error: dict[str, Any] | None,
) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = (
        None
        if parent_span_id is None
        else SpanContext(trace_id, parent_span_id, is_remote=True, trace_flags=flags)
    )
    status = Status(StatusCode.UNSET)
    if error:
        attributes["error.type"] = str(error.get("code") or error.get("type") or "error")
        status = Status(StatusCode.ERROR, str(error.get("message", ""))[:500])
    provider = trace.get_tracer_provider()
    return ReadableSpan(
        name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        resource=getattr(provider, "resource", None),
        attributes=attributes,
        kind=trace.SpanKind.INTERNAL,
        instrumentation_scope=InstrumentationScope(TRACER_NAME),
        status=status,
        start_time=_nanoseconds(start),
        end_time=_nanoseconds(end),
    )
