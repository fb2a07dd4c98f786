"""Traces of committed work through OpenTelemetry (`OTEL`, the `[otel]` extra): spans built from
rows after they commit, with ids derived from (run, step key, attempt), so a replay emits
nothing and a crash loses no span of committed work. A step attempt's span is exported once
its outcome commits, a run's span once the run ends. A run's `traceparent` (its caller's at
start, or its parent's step attempt for a child run) puts its spans in the caller's trace.

Spans go to the span processors of the global SDK TracerProvider the host configures (with
the exporter of its choice: OTLP, console, in-memory)."""

from __future__ import annotations

import functools
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..conf import pikku_settings
from . import instruments

logger = logging.getLogger(__name__)

TRACER_NAME = "pikku_workflows"


def tracing_on() -> bool:
    """`OTEL` is true and the OpenTelemetry SDK is installed."""
    return bool(pikku_settings.OTEL) and _sdk() is not None


@functools.cache
def _sdk() -> SimpleNamespace | None:
    """What building a span takes from OpenTelemetry, imported once (None: not installed)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace.status import Status, StatusCode
    except ImportError:
        return None
    return SimpleNamespace(
        trace=trace,
        ReadableSpan=ReadableSpan,
        scope=InstrumentationScope(TRACER_NAME),
        sampled=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        Status=Status,
        StatusCode=StatusCode,
        unset=Status(StatusCode.UNSET),
    )


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
    if parsed:
        return parsed[0]
    return run_id.int if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id)).int


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


def export_attempt_after_commit(step: Any) -> None:
    """Once the write that ended the step's attempt commits, export its span: from the values
    that write recorded, as `step` holds them now, or else read from its history row."""
    if not tracing_on():
        return
    started = getattr(step, "attempt_started_at", None)
    ended = getattr(step, "ended_at", None)
    if started is None or ended is None:
        export_attempt_from_rows_after_commit(step.pk, step.attempt)
        return
    attempt = AttemptFacts(
        run_id=step.run_id,
        step_key=step.step_key,
        attempt=step.attempt,
        kind=step.kind,
        function_name=step.function_name,
        dispatch=getattr(step, "attempt_dispatch", None),
        worker=None,
        error=step.error if step.status == "failed" else None,
        started=started,
        ended=ended,
    )
    _after_commit(_attempt_ended, attempt)


def export_run_after_commit(run_id: Any, status: str, error: dict[str, Any] | None) -> None:
    """Once the write that ended the run (`status`, `error`) commits, export its span, ending
    now (the clock of its attempts' times), and count it."""
    if tracing_on():
        _after_commit(_run_ended, run_id, status, error, timezone.now())


def _after_commit(observe: Callable[..., None], *args: Any) -> None:
    transaction.on_commit(lambda: _guarded(observe, *args))


def _guarded(observe: Callable[..., None], *args: Any) -> None:
    # A backend's trouble must never fail a run or a pass: the span is lost, said once.
    try:
        observe(*args)
    except Exception:
        logger.warning("pikku_workflows: a span could not be exported", exc_info=True)


def _attempt_ended(attempt: AttemptFacts) -> None:
    duration = instruments.seconds_between(attempt.started, attempt.ended)
    if duration is not None:
        instruments.record_attempt_duration(attempt.function_name, attempt.dispatch, duration)
    _export(_attempt_span(attempt))


def _export(span: Any) -> None:
    processor = _span_processor()
    if processor is not None:
        processor.on_end(span)


def _span_processor() -> Any:
    sdk = _sdk()
    assert sdk is not None, "spans are exported only with tracing on"
    # The SDK's provider hands ended spans to its processors (their exporters) this way; the
    # API's no-op provider has none.
    return getattr(sdk.trace.get_tracer_provider(), "_active_span_processor", None)


def _nanoseconds(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1_000_000_000)


def export_attempt_from_rows_after_commit(step_id: Any, attempt: int) -> None:
    """As `export_attempt_after_commit`, the span read from the attempt's history row (an
    attempt ended by another process's write: its lease lapsed)."""
    if tracing_on():
        _after_commit(_attempt_ended_from_rows, step_id, attempt)


@dataclass(frozen=True)
class AttemptFacts:
    """What an attempt's span says, as its rows record it."""

    run_id: Any
    step_key: str
    attempt: int
    kind: str
    function_name: str | None
    dispatch: str | None
    worker: str | None
    error: dict[str, Any] | None
    started: datetime | None
    ended: datetime | None


@dataclass(frozen=True)
class RunFacts:
    """What every span of a run needs from its row; none of it ever changes."""

    workflow: str
    traceparent: str | None
    created_at: datetime


# The runs this process drives or traced lately, so their spans read no row: noted when a pass
# starts, dropped when the run's own span is exported.
_run_facts: dict[str, RunFacts] = {}
RUN_FACTS_KEPT = 10_000


def note_run(run: Any) -> None:
    """Keep what `run`'s spans need while this process drives it (no read per span)."""
    if tracing_on():
        _keep_facts(str(run.pk), RunFacts(run.workflow, run.traceparent, run.created_at))


def _keep_facts(key: str, facts: RunFacts) -> None:
    if len(_run_facts) >= RUN_FACTS_KEPT:
        _run_facts.clear()
    _run_facts[key] = facts


def _facts_of_run(run_id: Any) -> RunFacts | None:
    key = str(run_id)
    facts = _run_facts.get(key)
    if facts is None:
        facts = _read_run_facts(run_id)
        if facts is not None:
            _keep_facts(key, facts)
    return facts


def _read_run_facts(run_id: Any) -> RunFacts | None:
    from ..models import WorkflowRun

    runs = WorkflowRun.objects.filter(pk=run_id)
    row = runs.values_list("workflow", "traceparent", "created_at").first()
    return None if row is None else RunFacts(*row)


def _attempt_span(facts: AttemptFacts) -> Any:
    run = _facts_of_run(facts.run_id)
    workflow, traceparent = (run.workflow, run.traceparent) if run else ("", None)
    attributes = {
        "pikku.run_id": str(facts.run_id),
        "pikku.workflow": workflow,
        "pikku.step_key": facts.step_key,
        "pikku.step_kind": facts.kind,
        "pikku.attempt": facts.attempt,
        "code.function.name": facts.function_name or "",
        "pikku.dispatch": facts.dispatch or "",
    }
    if facts.worker:
        attributes["host.name"] = facts.worker.rpartition(":")[0]
    return _span(
        f"step {facts.step_key}",
        trace_id_of(facts.run_id, traceparent),
        attempt_span_id(facts.run_id, facts.step_key, facts.attempt),
        run_span_id(facts.run_id),
        start=facts.started,
        end=facts.ended,
        attributes=attributes,
        error=facts.error,
    )


def _attempt_ended_from_rows(step_id: Any, attempt: int) -> None:
    facts = _attempt_facts_from_rows(step_id, attempt)
    if facts is not None:
        _attempt_ended(facts)


def _attempt_facts_from_rows(step_id: Any, attempt: int) -> AttemptFacts | None:
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
        )
        .first()
    )
    if row is None:
        return None
    return AttemptFacts(
        run_id=row["step__run_id"],
        step_key=row["step__step_key"],
        attempt=attempt,
        kind=row["step__kind"],
        function_name=row["step__function_name"],
        dispatch=row["dispatch"],
        worker=row["worker"],
        error=row["error"] if row["status"] == "failed" else None,
        started=row["running_at"] or row["created_at"],
        ended=row["succeeded_at"] or row["failed_at"],
    )


def _run_ended(run_id: Any, status: str, error: dict[str, Any] | None, ended: datetime) -> None:
    run = _run_facts.pop(str(run_id), None) or _read_run_facts(run_id)
    if run is None:
        return
    instruments.count_run_finished(run.workflow, status)
    _export(_run_span(run_id, run, status, error, ended))


def _run_span(
    run_id: Any, run: RunFacts, status: str, error: dict[str, Any] | None, ended: datetime
) -> Any:
    parsed = parse_traceparent(run.traceparent)
    attributes = {
        "pikku.run_id": str(run_id),
        "pikku.workflow": run.workflow,
        "pikku.run_status": status,
    }
    failed = status == "failed"
    return _span(
        f"workflow {run.workflow}",
        trace_id_of(run_id, run.traceparent),
        run_span_id(run_id),
        parsed[1] if parsed else None,
        start=run.created_at,
        end=ended,
        attributes=attributes,
        error=(error or {"code": status}) if failed else None,
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
    sdk = _sdk()
    assert sdk is not None, "spans are built only with tracing on"
    trace = sdk.trace
    flags = sdk.sampled
    parent = (
        None
        if parent_span_id is None
        else trace.SpanContext(trace_id, parent_span_id, is_remote=True, trace_flags=flags)
    )
    status = sdk.unset
    if error:
        attributes["error.type"] = str(error.get("code") or error.get("type") or "error")
        status = sdk.Status(sdk.StatusCode.ERROR, str(error.get("message", ""))[:500])
    provider = trace.get_tracer_provider()
    return sdk.ReadableSpan(
        name,
        context=trace.SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        resource=getattr(provider, "resource", None),
        attributes=attributes,
        kind=trace.SpanKind.INTERNAL,
        instrumentation_scope=sdk.scope,
        status=status,
        start_time=_nanoseconds(start),
        end_time=_nanoseconds(end),
    )
