"""`--otel` of the benches: tracing on (`PIKKU_OTEL=1`, which worker subprocesses inherit) with
an in-memory exporter behind a synchronous span processor, so every span's cost is paid on the
measured path, and an in-memory metric reader for the counters and histograms. Worker processes
install them through `bench.queued_workflows`."""

from __future__ import annotations

import os
from collections.abc import Callable

SWITCH = "PIKKU_OTEL"


def switch_tracing_on() -> None:
    os.environ[SWITCH] = "1"
    install_in_memory_exporter()


def install_in_memory_exporter() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def traced(run: Callable[[int], float]) -> Callable[[int], float]:
    """`run` with tracing on for its duration (settings read the variable on access), so a
    bench can alternate traced and untraced runs in one process."""

    def run_traced(k: int) -> float:
        os.environ[SWITCH] = "1"
        try:
            return run(k)
        finally:
            os.environ.pop(SWITCH, None)

    return run_traced


def tracing_requested() -> bool:
    return os.environ.get(SWITCH, "").lower() in ("1", "true", "yes", "on")


def spans_exported() -> int:
    """How many spans this process exported."""
    from opentelemetry import trace

    processor = getattr(trace.get_tracer_provider(), "_active_span_processor", None)
    exporters = [p.span_exporter for p in getattr(processor, "_span_processors", ())]
    return sum(len(exporter.get_finished_spans()) for exporter in exporters)
