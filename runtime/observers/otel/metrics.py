"""The GenAI client metrics, recorded once per request (`GenAIMetrics.record`).

`gen_ai.client.operation.duration` (s) and `gen_ai.client.token.usage` ({token}, one
point per `gen_ai.token.type`, input and output) with the conventions' names, units and
bucket advice; beside them raygent's counters: the cost (USD), the replies served from
the response cache, the 429s met, the seconds waited for a rate limit, the attempts that
failed inside a request (a fallback model's, a tier's refusal).

A request served from the cache sent nothing: it counts in `raygent.client.cache.hits`
alone, never as tokens used or as a duration. A request that failed has a duration with
`error.type` and no tokens.

The attribute sets are made once per distinct request shape (provider, models, route,
tier, error, tenant, job, server) and kept, so recording a request allocates nothing
after the first of its shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import names as n
from .requests import FailedAttempt, RequestRecord

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

__all__ = ["GenAIMetrics"]

# Distinct attribute sets kept; past it they are made afresh (a runaway of model names).
_MAX_KEPT = 4096

_Key = tuple[Any, ...]


class GenAIMetrics:
    """The instruments of one meter provider, and the attribute sets recorded so far."""

    def __init__(self, meter_provider: MeterProvider | None, version: str) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter("raygent", version, meter_provider)
        self._duration = meter.create_histogram(
            n.DURATION,
            unit=n.DURATION_UNIT,
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            n.TOKEN_USAGE,
            unit=n.TOKEN_USAGE_UNIT,
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self._cost = meter.create_counter(
            n.COST_METRIC, unit="USD", description="What model requests cost, when priced."
        )
        self._hits = meter.create_counter(
            n.CACHE_HITS_METRIC,
            unit="{request}",
            description="Requests answered by the response cache (nothing sent).",
        )
        self._throttled = meter.create_counter(
            n.THROTTLED_METRIC, unit="{response}", description="429 replies met by requests."
        )
        self._rate_wait = meter.create_counter(
            n.RATE_WAIT_METRIC, unit="s", description="Seconds requests waited for rate limits."
        )
        self._failed = meter.create_counter(
            n.FAILED_ATTEMPTS_METRIC,
            unit="{request}",
            description="Attempts inside a request that failed: a fallback model's, a tier's.",
        )
        self._sets: dict[_Key, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
        self._failed_sets: dict[_Key, dict[str, Any]] = {}

    def record(self, request: RequestRecord) -> None:
        """Record one request's points (once per request: the caller's promise)."""
        common, inputs, outputs = self._attributes(request)
        if request.sent:
            if request.duration is not None:
                self._duration.record(request.duration, common)
            usage = request.usage
            if usage is not None and (usage.requests or usage.total_tokens):
                self._tokens.record(usage.total_input_tokens, inputs)
                self._tokens.record(usage.output_tokens, outputs)
                if usage.cost is not None and usage.cost.total:
                    self._cost.add(usage.cost.total, common)
        else:
            self._hits.add(1, common)
        if request.throttled:
            self._throttled.add(request.throttled, common)
        if request.rate_wait:
            self._rate_wait.add(request.rate_wait, common)
        for attempt in request.failed:
            self._failed.add(1, self._failed_attributes(attempt, request))

    def _attributes(
        self, request: RequestRecord
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        key = (
            request.operation,
            request.provider,
            request.model,
            request.response_model,
            request.error_type,
            request.route,
            request.response_tier,
            request.server_address,
            request.server_port,
            request.tenant,
            request.job,
        )
        found = self._sets.get(key)
        if found is None:
            more = {
                n.RESPONSE_MODEL: request.response_model,
                n.SERVER_ADDRESS: request.server_address,
                n.SERVER_PORT: request.server_port,
                n.tier_name(request.provider, response=True): request.response_tier,
            }
            common = _labels(request, request.provider, request.model, request.error_type, more)
            found = (
                common,
                {**common, n.TOKEN_TYPE: n.TOKEN_INPUT},
                {**common, n.TOKEN_TYPE: n.TOKEN_OUTPUT},
            )
            if len(self._sets) < _MAX_KEPT:
                self._sets[key] = found
        return found

    def _failed_attributes(self, attempt: FailedAttempt, request: RequestRecord) -> dict[str, Any]:
        key = (attempt, request.route, request.tenant, request.job)
        found = self._failed_sets.get(key)
        if found is None:
            more = {n.FALLBACK: attempt.fallback}
            found = _labels(request, attempt.provider, attempt.model, attempt.error_type, more)
            if len(self._failed_sets) < _MAX_KEPT:
                self._failed_sets[key] = found
        return found


def _labels(
    request: RequestRecord, provider: str, model: str, error: str | None, more: dict[str, Any]
) -> dict[str, Any]:
    """A point's attributes: the request's operation, route, tenant and job, and these."""
    return n.present(
        {
            n.OPERATION: request.operation,
            n.PROVIDER: n.provider_name(provider),
            n.REQUEST_MODEL: model,
            n.ERROR_TYPE: error,
            **more,
            n.ROUTE: request.route,
            n.TENANT: request.tenant,
            n.JOB: request.job,
        }
    )
