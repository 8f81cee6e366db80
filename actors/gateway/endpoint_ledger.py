"""One endpoint's bound as its gateway keeps it: which process holds which slice.

Plain Python (no Ray, no asyncio): the gateway actor applies every report to it and
sends each holder its grant; tests drive it directly.

The invariant is that the slices counted against the bound never add up to more than
the bound. A holder's `occupied` is what it may still be using. The ledger raises it
when it grants more. It lowers it only on the holder's own word: a report, sent after the
holder applied its latest grant, that it now holds less. It also drops it when the
lease expires. A holder never admits more than the grant it has received, and reports
max(grant, in use), so what it really uses is never more than what is counted.

Each holder declares the limits its models carry (`report(..., bounds=)`); the ledger
holds the tightest declaration among its live holders, so a model rebuilt with a new
bound is held to it as soon as the holders of the old one are gone (released or
expired), and two declarations that disagree never let more through than either.

Rate limits (requests, tokens, input and output tokens per minute) are kept by a
`RateBudget` (`rate_budget`): smooth buckets, granted to holders in small pieces,
learnt from what holders read in the replies' headers. While an endpoint with no
configured rate waits for its first reply (`Bounds.learn`: it may have limits it has
not yet said), only `PROBE_WINDOW` requests go at a time.

Capacity moves lazily: a holder keeps what it was granted, used or not, until another
holder is starved (below its fair share, with nothing free) or the adaptive limit
shrinks. A lone process therefore keeps the whole bound between bursts, and ten share it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from raygent.backend import PROBE_WINDOW, RateReading

from .rate_budget import KINDS, NO_RATES, Limits, RateBudget, Rates

__all__ = ["UNBOUNDED", "Bounds", "EndpointLedger", "Grant", "Report", "partition", "waterfill"]

N = TypeVar("N", int, float)
UNBOUNDED = 1 << 30  # an endpoint that declares no concurrency bound


@dataclass(frozen=True)
class Bounds:
    """One gateway's share of an endpoint's declared limits (None: not limited)."""

    max_concurrency: int | None = None
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    input_tokens_per_minute: float | None = None
    output_tokens_per_minute: float | None = None
    burst: float = 1.0  # seconds of each rate that may go at once
    share: float = 1.0  # this gateway's share of what the provider says (1 / replicas)
    learn: bool = False  # learn the rates from the replies' headers and 429s

    @property
    def rates(self) -> Limits:
        """The configured rate limits, in `rate_budget.KINDS` order."""
        return (
            self.requests_per_minute,
            self.tokens_per_minute,
            self.input_tokens_per_minute,
            self.output_tokens_per_minute,
        )


@dataclass(frozen=True)
class Report:
    """What a holder tells its gateway: its state now, and what happened since.

    `seq` orders one holder's reports (Ray does not keep the order of calls to an async
    actor): a report older than one applied is ignored. `version` is the last grant the
    holder applied; `incarnation` the gateway that sent it (another one: the gateway
    restarted, and `held` is a claim on what the holder still uses).
    """

    seq: int
    version: int
    incarnation: str | None
    want: int  # slots it could use now
    held: int  # max(its grant, its requests in flight)
    in_use: int
    succeeded: int = 0  # requests answered since its last report
    throttled: float | None = None  # a 429 came back: its Retry-After (0: none given)
    wanted: Rates = NO_RATES  # rate budget it asks for (`rate_budget.KINDS`)
    settled: Rates = NO_RATES  # estimates above usage (> 0) or below it (< 0), since last
    observed: RateReading | None = None  # what a reply's (or the 429's) headers said
    # The tenants it admits for (`raygent.Tenant`: name, weight); none: a weight of 1.
    tenants: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Grant:
    """What a holder may do: admit `slots` requests at once, wait `pause` seconds before
    the next, use the rate budget it is sent (`requests`, `tokens`: added to what it
    has; each request of it no sooner than its `due` time, when the rate is scheduled).
    The lease lives `ttl` seconds from when the holder sent the report."""

    version: int
    slots: int
    pause: float
    ttl: float
    incarnation: str
    rates: Rates = NO_RATES
    held: tuple[bool, bool, bool, bool] = (False, False, False, False)  # kinds held
    unbounded: bool = False  # no concurrency bound at all: admit without counting slots
    due: tuple[float, ...] = ()  # when each request granted may be sent (wall clock)


@dataclass
class _Holder:
    grant: int = 0  # what it may admit (as of `version`)
    occupied: int = 0  # what counts against the bound
    want: int = 0
    in_use: int = 0
    version: int = 0
    seq: int = -1
    expires: float = 0.0
    rates: Rates = NO_RATES  # rate budget granted, not yet sent
    due: list[float] = field(default_factory=list)  # the times of its requests granted
    wanted: Rates = NO_RATES
    bounds: Bounds | None = None  # the limits it declared (None: it declared none)
    tenants: tuple[tuple[str, float], ...] = ()


def _tightest(limits: Iterable[N | None]) -> N | None:
    """The smallest of the limits given (None and 0: no limit)."""
    given = [limit for limit in limits if limit]
    return min(given) if given else None


def partition(total: int, parts: int) -> list[int]:
    """Split `total` into at most `parts` positive shares that add up to `total`
    (floor/ceil): gateway replicas share a bound, they never multiply it."""
    if total <= 0 or parts <= 0:
        raise ValueError(f"cannot split {total} into {parts} parts")
    parts = min(parts, total)
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def waterfill(
    capacity: int, wants: dict[str, int], weights: dict[str, float] | None = None
) -> dict[str, int]:
    """Fair shares of `capacity`: by weight (equal by default), none above its want, what
    one leaves spread over the others (smallest wants per weight are settled first)."""
    shares: dict[str, int] = {}
    left, weight_of = capacity, weights or {}
    total = sum(weight_of.get(holder, 1.0) for holder in wants)
    ordered = sorted(wants.items(), key=lambda kv: kv[1] / weight_of.get(kv[0], 1.0))
    for holder, want in ordered:
        weight = weight_of.get(holder, 1.0)
        shares[holder] = min(want, int(left * weight / total + 1e-9))
        left -= shares[holder]
        total -= weight
    return shares


@dataclass
class EndpointLedger:
    """The bound of one endpoint (one gateway's share of it).

    `limit` adapts below the declared bound (AIMD): a 429 lowers it to one under the
    requests then in flight, each success grows it back by 1/limit. `claims_until`:
    after a restart, nothing new is granted until every lease of the previous
    incarnation would have expired; holders that still use slots claim them meanwhile.
    """

    bounds: Bounds
    now: float
    claims_until: float = 0.0
    holders: dict[str, _Holder] = field(default_factory=dict)
    pause_until: float = 0.0

    def __post_init__(self) -> None:
        self.bound = self.bounds.max_concurrency or UNBOUNDED
        self.limit = float(self.bound)
        self.rates = RateBudget(self.now)
        self._configure_rates(self.now)
        # Learning with nothing configured: a slow start until a reply comes.
        self.probing = self.bounds.learn and not any(self.bounds.rates)

    def _configure_rates(self, now: float) -> None:
        b = self.bounds
        self.rates.configure(b.rates, b.burst, b.share, b.learn, now)

    # -- declared limits ----------------------------------------------------------------

    def _declarations_changed(self, now: float) -> None:
        """Hold the tightest of the live holders' declarations (with none live, the last
        ones in force stay)."""
        declared = [h.bounds for h in self.holders.values() if h.bounds is not None]
        if not declared:
            return
        self.bounds = Bounds(
            _tightest(b.max_concurrency for b in declared),
            _tightest(b.requests_per_minute for b in declared),
            _tightest(b.tokens_per_minute for b in declared),
            _tightest(b.input_tokens_per_minute for b in declared),
            _tightest(b.output_tokens_per_minute for b in declared),
            burst=min(b.burst for b in declared),
            share=min(b.share for b in declared),
            learn=all(b.learn for b in declared),
        )
        if not self.bounds.learn or any(self.bounds.rates):
            self.probing = False
        bound = self.bounds.max_concurrency or UNBOUNDED
        if bound != self.bound:
            # Not throttled: the limit follows the bound. Throttled: it stays as low.
            at_bound = self.limit >= self.bound
            self.bound = bound
            self.limit = float(bound) if at_bound else min(self.limit, float(bound))
        self._configure_rates(now)

    # -- reports ----------------------------------------------------------------------

    def report(
        self,
        holder_id: str,
        report: Report,
        incarnation: str,
        now: float,
        ttl: float,
        bounds: Bounds | None = None,
    ) -> set[str]:
        """Apply a holder's report (and the limits it declares); returns the holders
        that have something new."""
        holder = self.holders.get(holder_id)
        if holder is None:
            holder = self.holders[holder_id] = _Holder()
        if bounds is not None and holder.bounds != bounds:
            holder.bounds = bounds
            self._declarations_changed(now)
        if report.seq <= holder.seq:
            return set()  # overtaken by a later report (or a duplicate)
        holder.seq = report.seq
        holder.expires = now + ttl
        holder.want, holder.in_use, holder.tenants = report.want, report.in_use, report.tenants
        if report.incarnation != incarnation:
            # A holder of the previous incarnation: what it still uses is real.
            holder.grant = holder.occupied = max(holder.occupied, report.held)
        elif report.version == holder.version:
            holder.occupied = min(holder.occupied, max(holder.grant, report.held))
        self._settle_rates(holder, report, now)
        changed = set()
        if report.throttled is not None:
            changed = self._throttle(report.throttled, report.observed, now)
        elif report.observed is not None:
            # What went while no rate was held: answered since its last report, in flight.
            unpaced = float(report.succeeded + self._in_flight())
            self.rates.learn(report.observed, now, unpaced)
        if report.succeeded and self.limit < self.bound:
            self.limit = min(float(self.bound), self.limit + report.succeeded / self.limit)
        if report.succeeded:
            self.probing = False
            self.rates.succeeded(report.succeeded, self._in_flight(), now)
        return changed | self.rebalance(now)

    def release(self, holder_id: str, returned: Rates, now: float) -> set[str]:
        """A holder gives back everything (it is idle or closing)."""
        gone = self.holders.pop(holder_id, None)
        if gone is None:
            return set()
        self.rates.settle(returned, now)
        if gone.bounds is not None:
            self._declarations_changed(now)
        return self.rebalance(now)

    def _in_flight(self) -> int:
        return sum(h.in_use for h in self.holders.values())

    def _throttle(self, retry_after: float, reading: RateReading | None, now: float) -> set[str]:
        in_flight = self._in_flight()
        self.limit = max(1.0, min(self.limit, float(in_flight)) - 1.0)
        self.rates.throttled(reading, in_flight, now, max(retry_after, 0.0))
        if retry_after > 0 and now + retry_after > self.pause_until:
            self.pause_until = now + retry_after
            return self._bump_all()  # every holder must hear of the pause now
        return set()

    def _settle_rates(self, holder: _Holder, report: Report, now: float) -> None:
        self.rates.settle(report.settled, now)
        held = self.rates.held()
        holder.wanted = tuple(w if h else 0.0 for w, h in zip(report.wanted, held, strict=True))  # type: ignore[assignment]

    # -- granting ---------------------------------------------------------------------

    def rebalance(self, now: float) -> set[str]:
        """Expire lapsed leases, then move slots and rate budget where they are wanted.
        Returns the holders whose grant changed."""
        changed: set[str] = set()
        lapsed = [h for h, s in self.holders.items() if s.expires <= now]
        for holder_id in lapsed:
            del self.holders[holder_id]
        if lapsed:
            self._declarations_changed(now)
        cap = min(self.bound, max(1, int(self.limit)))
        if self.probing:
            cap = min(cap, PROBE_WINDOW)  # a slow start, until a reply says the limits
        wants = {h: s.want for h, s in self.holders.items()}
        shares = waterfill(cap, wants, self._weights())
        free = cap - sum(s.occupied for s in self.holders.values())
        if now < self.claims_until:
            free = min(free, 0)  # claims only, until old leases would have expired
        starved = False
        for holder_id in sorted(shares, key=lambda h: self._fill(h, shares[h])):
            holder, share = self.holders[holder_id], shares[holder_id]
            if holder.grant >= share:
                continue
            room = max(0, holder.occupied - holder.grant) + max(0, free)
            grant = min(share, holder.grant + room)
            if grant > holder.grant:
                free -= max(0, grant - holder.occupied)
                holder.grant, holder.occupied = grant, max(holder.occupied, grant)
                changed.add(holder_id)
            starved = starved or holder.grant < share
        over = sum(s.grant for s in self.holders.values()) > cap
        if starved or over:
            for holder_id, share in shares.items():
                holder = self.holders[holder_id]
                if holder.grant > share:
                    holder.grant = share
                    changed.add(holder_id)
        changed |= self._grant_rates(now)
        for holder_id in changed:
            self.holders[holder_id].version += 1
        return changed

    def _weights(self) -> dict[str, float] | None:
        """Each holder's weight: its tenants' weights, each split over the holders
        busy for it (a tenant's share is its own, however many processes it runs in)."""
        busy = [h for h in self.holders.values() if h.tenants and (h.want or h.in_use)]
        if not busy:
            return None
        spread = Counter(name for h in busy for name, _ in h.tenants)
        return {
            holder_id: sum(w / spread[name] for name, w in h.tenants if spread[name]) or 1.0
            for holder_id, h in self.holders.items()
        }

    def _fill(self, holder_id: str, share: int) -> float:
        """How far a holder is from its share (the furthest is served first)."""
        return self.holders[holder_id].grant / share if share else math.inf

    def _grant_rates(self, now: float) -> set[str]:
        wants = {h: s.wanted for h, s in self.holders.items() if any(s.wanted)}
        pending = {h: self.holders[h].rates for h in wants}
        granted = self.rates.grant(wants, pending, now)
        for holder_id, given in granted.items():
            holder = self.holders[holder_id]
            holder.rates = _plus(holder.rates, given)
            holder.due.extend(self.rates.due.get(holder_id, ()))
            holder.wanted = _plus(holder.wanted, given, -1.0)
        return set(granted)

    def rates_ready_in(self, now: float) -> float | None:
        """Seconds until the rate budget some holder waits for has refilled (None: no
        one waits for it)."""
        wants = [(h.wanted, h.rates) for h in self.holders.values() if any(h.wanted)]
        return self.rates.ready_in(wants, now)

    def grant_for(
        self, holder_id: str, incarnation: str, now: float, ttl: float, wall: float | None = None
    ) -> Grant:
        """The holder's grant as it stands; the rate budget in it is handed over (the
        times of its requests on the wall clock, `wall` being `now` there)."""
        holder = self.holders.get(holder_id) or _Holder()
        rates, holder.rates = holder.rates, NO_RATES
        offset = 0.0 if wall is None else wall - now
        due, holder.due = tuple(t + offset for t in holder.due), []
        return Grant(
            version=holder.version,
            slots=holder.grant,
            pause=max(0.0, self.pause_until - now),
            ttl=ttl,
            incarnation=incarnation,
            rates=rates,
            held=self.rates.held(),
            unbounded=self.bound == UNBOUNDED and not self.probing,
            due=due,
        )

    def _bump_all(self) -> set[str]:
        for holder in self.holders.values():
            holder.version += 1
        return set(self.holders)

    def stats(self, now: float) -> dict[str, float]:
        holders = self.holders.values()
        return {
            "bound": self.bound,
            "limit": min(self.bound, max(1, int(self.limit))),
            "granted": sum(h.grant for h in holders),
            "occupied": sum(h.occupied for h in holders),
            "in_use": sum(h.in_use for h in holders),
            "holders": sum(1 for h in holders if h.grant or h.want or h.occupied),
            "paused_for": max(0.0, self.pause_until - now),
            **{
                f"{kind}_per_minute": rate or 0.0
                for kind, rate in zip(KINDS, self.rates.per_minute(), strict=True)
            },
        }


def _plus(a: Rates, b: Rates, sign: float = 1.0) -> Rates:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2], a[3] + sign * b[3])
