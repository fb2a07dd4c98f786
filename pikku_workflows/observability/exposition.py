"""The Prometheus text `GET metrics/` answers: the gauges read from the tables through a
`prometheus_client` collector (no multiprocess mode, no files per process), the text cached
for `METRICS_CACHE_SECONDS` in Django's cache so a burst of scrapes costs one read."""

from __future__ import annotations

from collections.abc import Iterator

from django.core.cache import cache
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..conf import pikku_settings
from .gauges import read_gauges

CACHE_KEY = "pikku_workflows:metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class TableCollector(Collector):
    """Reads every gauge from the tables each time it is collected."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for gauge in read_gauges():
            family = GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)
            for values, value in gauge.samples:
                family.add_metric(values, value)
            yield family


def metrics_text() -> bytes:
    """The exposition, from the cache while it is fresh, else read now (and cached)."""
    seconds = pikku_settings.METRICS_CACHE_SECONDS
    if seconds > 0:
        cached = cache.get(CACHE_KEY)
        if cached is not None:
            return bytes(cached)
    text = read_metrics_text()
    if seconds > 0:
        cache.set(CACHE_KEY, text, timeout=seconds)
    return text


def read_metrics_text() -> bytes:
    """The exposition read from the tables now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TableCollector())
    return generate_latest(registry)
