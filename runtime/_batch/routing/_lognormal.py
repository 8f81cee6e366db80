"""A lognormal time: what a provider batch or an online request takes, as its median and
its spread (the standard deviation of its log), with the sums a multi-trip item makes.

Lognormal because times to complete are positive, right-skewed and multiplicative
(queueing behind other tenants' work): a batch that usually takes 20 minutes sometimes
takes two hours, never minus ten. A sum of lognormals (an item's trips, one after
another) is approximated by the lognormal of the same mean and variance
(Fenton-Wilkinson), which is close in the upper tail a deadline cares about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["LogNormal", "z_of"]

_NORMAL = NormalDist()


def z_of(confidence: float) -> float:
    """The standard normal quantile of `confidence` (one-sided)."""
    return _NORMAL.inv_cdf(min(max(confidence, 1e-9), 1 - 1e-9))


@dataclass(frozen=True, slots=True)
class LogNormal:
    """A positive time: `median` seconds, `spread` the standard deviation of its log
    (0: always the median)."""

    median: float
    spread: float = 0.0

    def quantile(self, confidence: float) -> float:
        """The time taken no later than with probability `confidence`."""
        if self.median <= 0:
            return 0.0
        return self.median * math.exp(self.spread * z_of(confidence))

    def cdf(self, seconds: float) -> float:
        """The probability of taking at most `seconds`."""
        if seconds <= 0:
            return 0.0 if self.median > 0 else 1.0
        if self.median <= 0:
            return 1.0
        if self.spread == 0:
            return 1.0 if seconds >= self.median else 0.0
        return _NORMAL.cdf(math.log(seconds / self.median) / self.spread)

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.spread**2 / 2)

    def sum_of(self, count: float) -> LogNormal:
        """The time of `count` of these one after another (count >= 1; a fractional count
        scales as the mean does), as the lognormal of the same mean and variance."""
        count = max(count, 1.0)
        if self.spread == 0 or self.median <= 0:
            return LogNormal(self.median * count, 0.0)
        mean = self.mean * count
        variance = (math.exp(self.spread**2) - 1) * self.mean**2 * count
        sigma2 = math.log1p(variance / mean**2)
        return LogNormal(mean * math.exp(-sigma2 / 2), math.sqrt(sigma2))

    @classmethod
    def of_moments(cls, mean: float, variance: float) -> LogNormal:
        """The lognormal with this mean and variance (mean > 0)."""
        if mean <= 0:
            return cls(0.0, 0.0)
        sigma2 = math.log1p(max(variance, 0.0) / mean**2)
        return cls(mean * math.exp(-sigma2 / 2), math.sqrt(sigma2))

    @classmethod
    def fit(cls, seconds: list[float]) -> LogNormal | None:
        """The lognormal of these observed times (their log's mean and deviation); None
        with fewer than two."""
        logs = [math.log(max(s, 1e-6)) for s in seconds]
        if len(logs) < 2:
            return None
        mu = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mu) ** 2 for x in logs) / (len(logs) - 1))
        return cls(math.exp(mu), sd)
