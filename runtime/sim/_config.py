"""The simulator's options, defined once and shared by ``serve()`` and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ._batch_times import BatchTimes
from ._rates import SimRateLimits
from ._script import Fault, FaultKind, Latency
from ._tiers import ServiceTiers


@dataclass(frozen=True)
class SimConfig:
    """Server options; see :func:`raygent.sim.serve` for their meaning."""

    host: str = "127.0.0.1"
    port: int = 0
    latency: Latency = field(default_factory=Latency)
    max_concurrency: int | None = None
    retry_after: float = 1.0
    requests_per_minute: int | None = None
    rate_limits: SimRateLimits | None = None
    context_window: int | None = None
    fault_rate: float = 0.0
    fault_kinds: tuple[FaultKind | Fault, ...] = ("status",)
    seed: int = 0
    api_key: str | None = None
    batch_seconds: float = 0.0
    batch_expire_after: int | None = None
    batch_enqueued_tokens: int | None = None
    batch_times: Mapping[str, BatchTimes] = field(default_factory=dict)  # by provider
    tiers: ServiceTiers = field(default_factory=ServiceTiers)
    s3_endpoint_url: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError("fault_rate must be within [0, 1]")
        if self.fault_rate > 0 and not self.fault_kinds:
            raise ValueError("fault_rate needs at least one fault kind")
        given = self.rate_limits.requests_per_minute if self.rate_limits else None
        if None not in (given, self.requests_per_minute) and given != self.requests_per_minute:
            raise ValueError("requests_per_minute is given twice, with two values")
        for name in (
            "max_concurrency",
            "requests_per_minute",
            "context_window",
            "batch_enqueued_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1")

        if self.batch_seconds < 0:
            raise ValueError("batch_seconds must be at least 0")
        if self.batch_expire_after is not None and self.batch_expire_after < 0:
            raise ValueError("batch_expire_after must be at least 0")

    def rates(self) -> SimRateLimits | None:
        """The rate limits: ``rate_limits`` with ``requests_per_minute`` folded in."""
        rpm = self.requests_per_minute
        if rpm is None:
            return self.rate_limits
        return replace(self.rate_limits or SimRateLimits(), requests_per_minute=rpm)

    def faults(self) -> tuple[Fault, ...]:
        """``fault_kinds`` as :class:`Fault` values (a bare kind uses the defaults)."""
        return tuple(k if isinstance(k, Fault) else Fault(kind=k) for k in self.fault_kinds)
