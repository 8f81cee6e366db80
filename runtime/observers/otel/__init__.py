"""`raygent.observers.OpenTelemetry`: report trees as OpenTelemetry spans and GenAI
metrics, in the conventions' names (the `otel` extra).

names      every attribute, metric and value name (the GenAI semantic conventions', and
           raygent's own under `raygent.*`)
requests   `RequestRecord`: one model request as telemetry counts it; the requests a
           finished report tree made
spans      a finished report tree as spans
metrics    `GenAIMetrics`: the conventions' client metrics and raygent's counters,
           recorded once per request

Spans and metrics are made from the finished report, with the times it recorded, so
telemetry costs a run nothing while it runs.

May import what the observers may (it is part of them): the base and their own
modules; OpenTelemetry itself (the `otel` extra) only inside the calls that use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...redaction import logger as redacting_logger
from .requests import FailedAttempt, RequestRecord, requests_of

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ..report import RunReport
    from .metrics import GenAIMetrics
    from .spans import SpanWriter

__all__ = ["FailedAttempt", "OpenTelemetry", "RequestObserver", "RequestRecord"]

log = redacting_logger("raygent.observers")


class RequestObserver(Protocol):
    """What the request path's access layer calls once per request it settles, in the
    process that sent it (see `OpenTelemetry.request_settled`)."""

    def request_settled(self, request: RequestRecord) -> None: ...


class OpenTelemetry:
    """An observer that records each report tree as spans and, given a `meter_provider`,
    each request in it as GenAI metrics.

    Spans and metrics carry the OpenTelemetry GenAI semantic conventions' names
    (`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
    `gen_ai.usage.input_tokens`, ...; `docs/observability.md` has the table) and
    raygent's own facts under `raygent.*` (run ids, cost, cache, route, rate wait, 429s).
    A run that did not complete, a trip, step or tool call that failed has an error
    status and `error.type` (the error's code). Tool arguments and results and model
    text are left out unless `capture_content=True`. The root span's parent is the span
    current when the run ended, if any. Each request is counted once: `raygent.observers`
    hands an observer each report tree once, and a nested run is in its root's tree.

    Sent to another process (a run-local observer of a batch on Ray runs in the batch
    runners), it records there into that process's global providers (set them in the
    workers, e.g. with Ray's `worker_process_setup_hook`); registered in the driver
    (`raygent.observers.add`), it records the runners' runs where their reports arrive.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(
                "raygent.observers.OpenTelemetry needs OpenTelemetry: "
                "pip install 'raygent[otel]' (or opentelemetry-api and an SDK)"
            ) from exc
        from ..._version import __version__
        from .metrics import GenAIMetrics
        from .spans import SpanWriter

        tracer = trace.get_tracer("raygent", __version__, tracer_provider)
        self._spans: SpanWriter = SpanWriter(tracer, capture_content)
        self._metrics: GenAIMetrics | None = (
            None if meter_provider is None else GenAIMetrics(meter_provider, __version__)
        )
        # Where this observer's metrics come from: the requests of each report it is
        # handed, unless the access layer hands it each request as it settles (then
        # reports give spans alone, and no request is counted twice).
        self.metrics_from_reports = True

    @property
    def capture_content(self) -> bool:
        return self._spans.capture_content

    @capture_content.setter
    def capture_content(self, value: bool) -> None:
        self._spans.capture_content = value

    def __call__(self, report: RunReport) -> None:
        self._spans.write(report)
        if self._metrics is not None and self.metrics_from_reports:
            for request in requests_of(report):
                self._metrics.record(request)

    def __reduce__(self) -> tuple[Any, ...]:
        # Providers (their exporters, locks, threads) stay in their process: a copy
        # records into the global ones of the process it lands in.
        metered = self._metrics is not None
        return (_in_this_process, (self.capture_content, metered, self.metrics_from_reports))

    def request_settled(self, request: RequestRecord) -> None:
        """The hook for the access layer: record one settled request's metrics now.
        Whoever connects it sets `metrics_from_reports = False` on this observer first."""
        if self._metrics is not None:
            self._metrics.record(request)


def _in_this_process(capture_content: bool, metered: bool, from_reports: bool) -> OpenTelemetry:
    """An `OpenTelemetry` sent from another process, on this process's global providers."""
    from opentelemetry import trace

    from ..._version import __version__
    from .metrics import GenAIMetrics

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        log.warning(
            "raygent.observers.OpenTelemetry arrived in a process with no OpenTelemetry "
            "tracer provider set: its spans go nowhere here. Register it in the driver "
            "(raygent.observers.add), or set the providers in the workers."
        )
    observer = OpenTelemetry(capture_content=capture_content)
    if metered:  # None: the global meter provider
        observer._metrics = GenAIMetrics(None, __version__)
    observer.metrics_from_reports = from_reports
    return observer
