"""`Route`: how a job with a deadline chooses its ways (`raygent.batch(..., deadline=,
route=)`), and `RouteSummary`, what its report says of them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...usage import dollars
from .ways import WAYS, Way

__all__ = ["PlannedRoute", "Route", "RouteSummary", "deadline_text"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_SPAN = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


class Route(BaseModel):
    """How a job given a `deadline=` sends each item: the cheapest of the ways its model
    is reached (provider batch, flex, standard, priority) that still finishes the job
    by the deadline with `confidence`; `route="cheapest"` (the default with a deadline)
    is `Route()`.

    confidence: the chance the plan is to meet the deadline with (0.5 to 0.99...).
    store: any raygent store (`SQLiteStore`, `RedisStore`, `PostgresStore`,
        `InMemoryStore`) keeping the timings of recent batches and requests by endpoint
        and model, learnt from and added to by every job that shares it (drivers of one
        cluster, jobs of one team); None: this process's memory, shared by its jobs.
    ways: the ways the job may use (None: every way the model supports).
    batch_seconds: what a provider batch is expected to take (its median, submission
        to end) before the store has seen any (default 30 minutes).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    confidence: float = Field(default=0.95, ge=0.5, lt=1.0)
    store: Any = None
    ways: tuple[Way, ...] | None = None
    batch_seconds: float | None = Field(default=None, gt=0)

    @field_validator("ways")
    @classmethod
    def _known_ways(cls, ways: tuple[Way, ...] | None) -> tuple[Way, ...] | None:
        if ways is not None and not ways:
            raise ValueError(f"ways= names at least one of {', '.join(WAYS)}")
        return ways

    @field_validator("store")
    @classmethod
    def _a_store(cls, store: Any) -> Any:
        if store is not None and not callable(getattr(store, "add_timings", None)):
            raise ValueError(f"store= takes a raygent store, not {type(store).__name__}")
        return store


class RouteSummary(BaseModel):
    """What a job with a deadline did (its report's `route`).

    `planned`: items by way as planned at the start; `items`: items by the way their
    last attempt's trips went ("batch" only if every trip went by batch; else the
    online way of its last trip); `trips`: trips by way. `moved`: trips of items by
    batch that went online, by why ("late batch": its batch was late for the deadline,
    its line was sent online and the batch cancelled; "deadline": too near the
    deadline to wait for a batch, or its batch ended without answering it). `flex_refused`: flex
    requests refused for capacity and sent at standard. `paid_twice`: lines answered
    by their batch after they were sent online (and `paid_twice_cost`, USD at batch
    rates). `cost`: what the job's trips cost (USD); `online_cost`: what they would have
    cost all online at standard. `met`: every item ended by the deadline; `finished`:
    when the last one did."""

    model_config = ConfigDict(extra="forbid")
    deadline: datetime
    confidence: float
    planned: dict[str, int] = Field(default_factory=dict)
    items: dict[str, int] = Field(default_factory=dict)
    trips: dict[str, int] = Field(default_factory=dict)
    moved: dict[str, int] = Field(default_factory=dict)
    flex_refused: int = 0
    paid_twice: int = 0
    paid_twice_cost: float | None = None
    cost: float | None = None
    online_cost: float | None = None
    met: bool | None = None
    finished: datetime | None = None

    def line(self) -> str:
        """One line: where items went, what moved, cost against all online, and whether
        the deadline held."""
        ways = ", ".join(f"{n} {w}" for w, n in self.items.items() if n) or "no items"
        moved = sum(self.moved.values())
        parts = [ways]
        if moved:
            parts.append(f"{moved} trips moved online")
        if self.paid_twice:
            parts.append(f"{self.paid_twice} paid twice")
        if self.cost is not None and self.online_cost:
            parts.append(f"{self.cost / self.online_cost:.2f}x all-online")
        if self.met is not None:
            parts.append("deadline met" if self.met else "deadline MISSED")
        return "; ".join(parts)


class PlannedRoute(BaseModel):
    """What a job with a deadline is planned to do (an `Estimate`'s `route`): `items`
    by way ("batch": by provider batch, sent online at `rescue` if late), `cost` (USD
    expected; None: unpriced) and `cost_high` (at the confidence), `online_cost` (the
    same items all online at standard), `finish` and `finish_high` (seconds from the
    start: expected, and at the confidence); or `refused`, why no plan meets the
    deadline (and budget), and what would."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    deadline: datetime
    confidence: float
    items: dict[str, int] = Field(default_factory=dict)
    rescue: str | None = None
    cost: float | None = None
    cost_high: float | None = None
    online_cost: float | None = None
    finish: float | None = None
    finish_high: float | None = None
    refused: str | None = None

    def line(self) -> str:
        if self.refused is not None:
            return f"deadline cannot be met: {self.refused}"
        ways = ", ".join(f"{n:,} {w}" for w, n in self.items.items() if n)
        text = f"by the deadline: {ways}"
        if self.cost is not None:
            text += f", ~{dollars(self.cost)}"
            if self.online_cost:
                text += f" ({self.cost / self.online_cost:.2f}x all-online)"
        if self.finish is not None and self.finish_high is not None:
            text += f", done in ~{_span(self.finish)} ({_span(self.finish_high)} at"
            text += f" {self.confidence:.0%})"
        return text


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.1f} s"


def deadline_text(text: str) -> timedelta | datetime:
    """A deadline as the CLI's `--deadline` takes it: a span from now (`6h`, `90m`,
    `1h30m`, `45s`, `2d`) or an ISO datetime (`2026-01-31T18:00`, naive: local time);
    ValueError for anything else."""
    spoken = text.strip().lower().replace(" ", "")
    parts = _SPAN.findall(spoken)
    if parts and "".join(n + u for n, u in parts) == spoken:
        return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--deadline takes a span from now (6h, 90m, 1h30m, 45s, 2d) or an ISO"
            f" datetime (2026-01-31T18:00), not {text!r}"
        ) from None
