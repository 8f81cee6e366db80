"""A job's budget as its gateway keeps it: what each holder was granted and has spent.

Plain Python (no Ray, no asyncio), like `EndpointLedger` for the provider bounds: the
gateway applies every holder's `Claim` to it and answers with a `Slice`; tests drive it
directly.

A holder (a process running the job's agents) reserves each request's worst case within
what it was granted, locally, and reports cumulative figures (what it has spent, what it
has in flight, what it was granted): a report lost, repeated or out of order changes
nothing. What the book counts against the budget is, per holder, the larger of what it
was granted and what it spent; so the spend passes the budget only by what a reply used
beyond its reservation. A holder that stops reporting (dead) loses its lease after
`ttl`: what it had reported spent stays spent, the rest of its grant comes back. What it
spent since its last report is lost to the book: the budget can be passed by at most
that, which is bounded by its grant (its slices amortise the calls: never one per
request).

A holder that needs more than is free is refused (it waits for its own requests in flight,
or gives back what it does not use and asks again). Once a need could not be met even
if every request in flight settled at nothing and every unused grant came back, the
job's budget is *exhausted*: every holder hears it at its next report, and a batch
starts no new item.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["BudgetBook", "Claim", "Slice"]

Vector = tuple[float, ...]
ZERO: Vector = (0.0,) * 5


@dataclass(frozen=True)
class Claim:
    """What a holder tells the book (cumulative over its lease, so idempotent).

    `incarnation` is the gateway it last heard from (another one: the gateway restarted,
    and `granted` is a claim on what it was given before)."""

    seq: int
    incarnation: str | None
    granted: Vector
    spent: Vector
    reserved: Vector
    want: Vector = ZERO  # more it could use now
    need: Vector = ZERO  # more without which a reservation fails now
    release: bool = False  # done: it gives back what it was not using
    give_back: bool = False  # it keeps only what it spent and has in flight


@dataclass(frozen=True)
class Slice:
    """The book's answer: the holder's whole grant (cumulative), whether the budget is
    exhausted, and how long the lease lives from when the claim was sent."""

    granted: Vector
    exhausted: bool
    ttl: float
    incarnation: str


@dataclass
class _Holder:
    granted: list[float] = field(default_factory=lambda: [0.0] * 5)
    spent: Vector = ZERO
    reserved: Vector = ZERO
    seq: int = -1
    expires: float = 0.0


class BudgetBook:
    """One job's budget at its gateway (see the module docstring)."""

    def __init__(self, limits: Sequence[float]) -> None:
        self.limits = tuple(limits)
        self.holders: dict[str, _Holder] = {}
        self.gone = [0.0] * 5  # spent by holders whose lease ended
        self.exhausted = False

    def counted(self) -> list[float]:
        """What counts against the budget: spent by those gone, and per holder the larger
        of its grant and its spend."""
        total = list(self.gone)
        for holder in self.holders.values():
            for i in range(5):
                total[i] += max(holder.granted[i], holder.spent[i])
        return total

    def free(self) -> list[float]:
        counted = self.counted()
        return [
            math.inf if math.isinf(limit) else max(0.0, limit - used)
            for limit, used in zip(self.limits, counted, strict=True)
        ]

    def claim(
        self, holder_id: str, claim: Claim, incarnation: str, now: float, ttl: float
    ) -> Slice:
        holder = self.holders.get(holder_id)
        if holder is None:
            holder = self.holders[holder_id] = _Holder()
            if claim.incarnation is not None and claim.incarnation != incarnation:
                # This gateway restarted: the holder claims what it was granted before.
                holder.granted = list(claim.granted)
        if claim.seq > holder.seq:
            holder.seq, holder.spent, holder.reserved = claim.seq, claim.spent, claim.reserved
            holder.expires = now + ttl
            if claim.release:
                self._end(holder_id)
                return Slice(tuple(holder.granted), self.exhausted, ttl, incarnation)
            self._grant(holder, claim)
        return Slice(tuple(holder.granted), self.exhausted, ttl, incarnation)

    def _grant(self, holder: _Holder, claim: Claim) -> None:
        if claim.give_back:
            holder.granted = [s + r for s, r in zip(claim.spent, claim.reserved, strict=True)]
        free = self.free()
        need = claim.need
        if any(n > 0 and n > f + 1e-12 for n, f in zip(need, free, strict=True)):
            possible = self._possible(holder)
            if any(n > 0 and n > p + 1e-12 for n, p in zip(need, possible, strict=True)):
                self.exhausted = True
            return  # refused: busy (others hold it), or exhausted
        for i in range(5):
            if not math.isinf(self.limits[i]) and claim.want[i] > 0:
                holder.granted[i] += min(claim.want[i], free[i])

    def _possible(self, asking: _Holder) -> list[float]:
        """What `asking` could be granted beyond its room if every request in flight
        settled at nothing and every unused grant came back."""
        used = list(self.gone)
        for holder in self.holders.values():
            for i in range(5):
                used[i] += holder.spent[i] + (0.0 if holder is asking else holder.reserved[i])
        room = [
            max(0.0, g - s - r)
            for g, s, r in zip(asking.granted, asking.spent, asking.reserved, strict=True)
        ]
        return [
            math.inf if math.isinf(limit) else limit - u - rm
            for limit, u, rm in zip(self.limits, used, room, strict=True)
        ]

    def _end(self, holder_id: str) -> None:
        holder = self.holders.pop(holder_id)
        for i in range(5):
            self.gone[i] += holder.spent[i]

    def expire(self, now: float) -> bool:
        """End the leases not renewed in time; whether any holder is left."""
        for holder_id in [h for h, s in self.holders.items() if s.expires <= now]:
            self._end(holder_id)
        return bool(self.holders)

    def stats(self) -> dict[str, object]:
        spent = list(self.gone)
        reserved = [0.0] * 5
        for holder in self.holders.values():
            for i in range(5):
                spent[i] += holder.spent[i]
                reserved[i] += holder.reserved[i]
        return {
            "limits": list(self.limits),
            "spent": spent,
            "reserved": reserved,
            "counted": self.counted(),
            "holders": len(self.holders),
            # What each holder holds beyond its spend, by holder (its id starts with its pid).
            "held": {
                holder_id: [max(0.0, g - s) for g, s in zip(h.granted, h.spent, strict=True)]
                for holder_id, h in self.holders.items()
            },
            "exhausted": self.exhausted,
        }
