"""One model request as telemetry counts it (`RequestRecord`), and the requests a finished
report tree made (`requests_of`).

A request is what a run asked a model for once: a trip. Whatever happened under it is
inside it and counted with it, once: its 429s retried (on Ray, by the gateway's lease),
its `Tier`'s refusal and the send again at the fallback tier, a fallback model's failed
attempts before the model that answered, the wait for a line of a provider batch, the
chunks of a stream. A reply served from the response cache is a request that sent
nothing (`cache="hit"`): it has a span but no tokens counted as used and no duration.

A durable run's report holds the trips of its earlier attempts too; a resumed run counts
only the trips from its last resume on (the earlier attempt's report counted the rest,
as a batch counts its usage), and a resumed flow only the runs of the steps it ran again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ...usage import Usage
from ..report import AgentReport, FlowReport, RunReport, TripReport
from .names import CHAT, OTHER_ERROR

__all__ = [
    "FailedAttempt",
    "RequestRecord",
    "failed_attempts",
    "fresh_trips",
    "requests_of",
    "resumed_from",
    "trip_request",
]


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """An attempt inside a request that did not answer it: a fallback model that failed
    (`fallback="model"`), or a tier refused for capacity (`"tier"`)."""

    model: str
    provider: str
    error_type: str
    fallback: Literal["model", "tier"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One model request as it settled: what telemetry records of it, once.

    `provider` and `model` are the ones asked (raygent's names); `response_model` what
    the provider said answered. `usage` is None when nothing was billed (a failure);
    `duration` the seconds from the request's start to its answer or failure, every
    retry and fallback inside it. `error_type` is set when it failed (the error's code).
    `route` "batch": answered as a line of a provider batch. `cache` "hit": served from
    the response cache, nothing sent. `throttled`: the 429s it met; `rate_wait`: the
    seconds it waited for a rate limit.
    """

    provider: str
    model: str
    usage: Usage | None = None
    duration: float | None = None
    operation: str = CHAT
    response_model: str | None = None
    finish_reason: str | None = None
    error_type: str | None = None
    route: Literal["online", "batch"] = "online"
    cache: Literal["hit", "miss", "unavailable"] | None = None
    request_tier: str | None = None
    response_tier: str | None = None
    throttled: int = 0
    rate_wait: float = 0.0
    failed: tuple[FailedAttempt, ...] = ()
    server_address: str | None = None
    server_port: int | None = None
    tenant: str | None = None
    job: str | None = None

    @property
    def sent(self) -> bool:
        """Whether a request went out (not a cache hit)."""
        return self.cache != "hit"


def requests_of(report: RunReport) -> Iterator[RequestRecord]:
    """Every request a report tree made, nested runs' and flows' included, once each."""
    if isinstance(report, FlowReport):
        for run in _fresh_runs(report):
            yield from requests_of(run)
        return
    for trip in fresh_trips(report):
        yield trip_request(report, trip)
    start = resumed_from(report)
    for call in report.tool_calls:
        if call.child is not None and call.trip_index >= start:
            yield from requests_of(call.child)


def trip_request(report: AgentReport, trip: TripReport) -> RequestRecord:
    """The request a trip made, from what its report recorded."""
    failed = failed_attempts(trip)
    refused = next((a for a in failed if a.fallback == "tier"), None)
    error_type = None
    if trip.finish_reason is None:  # the trip never got its reply
        error_type = _error_type(report.error) if trip is report.trips[-1] else OTHER_ERROR
    return RequestRecord(
        provider=trip.response_provider or report.model.provider,
        model=report.model.name,
        usage=None if error_type is not None else trip.usage,
        duration=trip.timing.duration,
        response_model=trip.response_model,
        finish_reason=trip.finish_reason,
        error_type=error_type,
        route=trip.via,
        cache=trip.cache,
        request_tier=_tier_asked(trip) if refused is not None else None,
        response_tier=trip.service_tier,
        throttled=trip.throttled,
        rate_wait=trip.rate_wait,
        failed=failed,
        tenant=report.tenant,
    )


def failed_attempts(trip: TripReport) -> tuple[FailedAttempt, ...]:
    """A trip's attempts that did not answer it: its fallback models that failed and its
    tier's refusal. A send retried after a 429 (the access layer lists each send) is the
    same attempt sent again: it is counted in `throttled`, not here."""
    found = []
    for attempt in trip.attempts:
        if "attempt" in attempt and "fallback" not in attempt:
            continue  # one send of a request sent again (a tier refused is an attempt)
        found.append(
            FailedAttempt(
                model=str(attempt.get("model")),
                provider=str(attempt.get("provider")),
                error_type=_error_type(attempt.get("error")),
                fallback="tier" if "fallback" in attempt else "model",
            )
        )
    return tuple(found)


def fresh_trips(report: AgentReport) -> list[TripReport]:
    """The trips this delivery of the report counts: from its last resume on."""
    start = resumed_from(report)
    return report.trips if start == 0 else [t for t in report.trips if t.index >= start]


def resumed_from(report: AgentReport) -> int:
    """The first trip this delivery of the report counts (past the last: none)."""
    if not report.resumes:
        return 0
    last = report.resumes[-1]
    return len(report.trips) + 1 if last.already_resolved else last.from_trip


def _fresh_runs(report: FlowReport) -> Iterator[RunReport]:
    settled = 0
    if report.resumes:
        last = report.resumes[-1]
        settled = len(report.steps) if last.already_resolved else last.settled_steps
    for step in report.steps[settled:]:
        for run in step.runs:
            yield run.report


def _tier_asked(trip: TripReport) -> str | None:
    for attempt in trip.attempts:
        if "fallback" in attempt:
            tier = attempt.get("service_tier")
            return None if tier is None else str(tier)
    return None


def _error_type(error: Any) -> str:
    if isinstance(error, dict) and error.get("code"):
        return str(error["code"])
    return OTHER_ERROR
