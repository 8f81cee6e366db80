"""What the telemetry tests share: an `OpenTelemetry` observer on the real SDK with an
in-memory span exporter and metric reader, and how to count what it emitted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import raygent

DURATION = "gen_ai.client.operation.duration"
TOKENS = "gen_ai.client.token.usage"


class Telemetry:
    """An observer and what it emitted: spans and metric points."""

    def __init__(self, capture_content: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        tracing = TracerProvider()
        tracing.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.otel = raygent.observers.OpenTelemetry(
            tracing, meter_provider=self.meters, capture_content=capture_content
        )

    def close(self) -> None:
        self.exporter.shutdown()
        self.meters.shutdown()

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def chats(self) -> list[ReadableSpan]:
        return self.spans("chat ")

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        if data is None:
            return {}
        return {
            metric.name: metric
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def points(self, name: str, where: dict[str, Any] | None = None) -> Iterator[Any]:
        """The points of metric `name` whose attributes include `where`."""
        metric = self.metrics().get(name)
        if metric is None:
            return
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            if all(attributes.get(key) == value for key, value in (where or {}).items()):
                yield point

    def count(self, name: str, where: dict[str, Any] | None = None) -> int:
        """How many values a histogram recorded (matching `where`)."""
        points = self.points(name, where)
        return sum(p.count for p in points if isinstance(p, HistogramDataPoint))

    def total(self, name: str, where: dict[str, Any] | None = None) -> float:
        """The sum a histogram or a counter recorded (matching `where`)."""
        found = 0.0
        for point in self.points(name, where):
            if isinstance(point, HistogramDataPoint):
                found += point.sum
            elif isinstance(point, NumberDataPoint):
                found += point.value
        return found


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
