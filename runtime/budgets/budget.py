"""Budgets: what a run or a job may spend, and the ledger that holds it.

Before each request its worst case is reserved (`worst_case`: the input, estimated, plus
its `max_tokens` of output, at the model's prices); the reply settles it at the real
usage. A reservation that does not fit beside those in flight waits for them to settle;
one that would not fit even with none in flight raises `BudgetExceededError` and the
request is not sent. Amounts are plain tuples over `DIMENSIONS` (a request's accounting must cost
next to nothing); `BudgetAmount` is their reported form.

`Account` is the arithmetic (limits, reserved, spent), written once: a `LocalBudgetLedger`
(one per run, or per job in this process) is an account whose limits are the budget's;
a Ray holder keeps an account whose limits are the slices its gateway granted it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BudgetExceededError, InvalidOptionsError
from ..messages import Message
from ..models.contract import Model, ModelOptions, Tier, as_provider_model
from ..pricing import Pricing, lookup_pricing
from ..rates import estimate
from ..usage import Usage

__all__ = [
    "DIMENSIONS",
    "NOTHING",
    "Account",
    "Amount",
    "Budget",
    "BudgetAmount",
    "BudgetLedger",
    "BudgetReport",
    "LocalBudgetLedger",
    "LocalBudgets",
    "amount_of",
    "pricing_of",
    "worst_case",
]

DIMENSIONS = ("usd", "tokens", "input_tokens", "output_tokens", "requests")
Amount = tuple[float, float, float, float, float]
NOTHING: Amount = (0.0, 0.0, 0.0, 0.0, 0.0)
_PER_MTOK = 1_000_000


class Budget(BaseModel):
    """What may be spent: USD, tokens (input plus output), input tokens, output tokens,
    requests; None leaves a dimension unlimited.

    Given as `budget=` to a call (`agent.execute(..., budget=...)`: that run), to
    `raygent.agent(..., budget=...)` (each of its runs) or to `raygent.batch(...,
    budget=...)` (the whole job, shared by its runs, cluster-wide on Ray)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    usd: float | None = Field(default=None, ge=0)
    tokens: int | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    requests: int | None = Field(default=None, ge=0)

    def __init__(
        self,
        usd: float | None = None,
        tokens: int | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        requests: int | None = None,
    ) -> None:
        _check_limits(
            usd=usd,
            tokens=tokens,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            requests=requests,
        )
        super().__init__(
            usd=usd,
            tokens=tokens,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            requests=requests,
        )

    @property
    def limits(self) -> Amount:
        """The limits as an amount (unlimited: infinity)."""
        return tuple(  # type: ignore[return-value]
            math.inf if v is None else float(v) for v in (self._values())
        )

    @property
    def counts_tokens(self) -> bool:
        """Whether a token dimension is limited (a dollar budget with a model of
        unknown pricing is enforceable only then)."""
        return any(v is not None for v in (self.tokens, self.input_tokens, self.output_tokens))

    def _values(self) -> tuple[float | None, ...]:
        return (self.usd, self.tokens, self.input_tokens, self.output_tokens, self.requests)


def _check_limits(**limits: float | None) -> None:
    """A budget limits something, and by a number that is not negative: said in raygent's
    words (an `InvalidOptionsError`) before pydantic would say it in its own."""
    given = {name: value for name, value in limits.items() if value is not None}
    if not given:
        raise InvalidOptionsError(
            "Budget() needs a limit: usd=, tokens=, input_tokens=, output_tokens= or requests="
        )
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise InvalidOptionsError(f"Budget({name}=...) takes a number, not {value!r}")
        if value < 0:
            raise InvalidOptionsError(f"Budget({name}=...) cannot be negative, got {value!r}")


class BudgetAmount(BaseModel):
    """An amount as reported: USD, tokens, input tokens, output tokens, requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    usd: float = 0.0
    tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @classmethod
    def of(cls, amount: Sequence[float]) -> BudgetAmount:
        usd, *counts = amount
        rest = {k: round(v) for k, v in zip(DIMENSIONS[1:], counts, strict=True)}
        # `+ 0.0`: a reservation settled to nothing may round to -0.0 ("$-0.0000").
        return cls(usd=round(usd, 9) + 0.0, **rest)


class BudgetReport(BaseModel):
    """A budget's standing: its limits, what was spent, what is reserved by requests in
    flight, and what is left (None for an unlimited dimension)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    limit: Budget
    spent: BudgetAmount
    reserved: BudgetAmount
    left: dict[str, float | None]

    @classmethod
    def of(cls, budget: Budget, spent: Sequence[float], reserved: Sequence[float]) -> BudgetReport:
        left = {
            name: None if math.isinf(limit) else max(0.0, limit - s - r)
            for name, limit, s, r in zip(DIMENSIONS, budget.limits, spent, reserved, strict=True)
        }
        return cls(
            limit=budget,
            spent=BudgetAmount.of(spent),
            reserved=BudgetAmount.of(reserved),
            left=left,
        )


def amount_of(usage: Usage) -> Amount:
    """What a usage spent, as an amount (an unknown cost counts 0 USD)."""
    cost = usage.cost
    usd = 0.0 if cost is None else cost.total
    total_input = usage.total_input_tokens
    return (
        usd,
        float(total_input + usage.output_tokens),
        float(total_input),
        float(usage.output_tokens),
        float(usage.requests),
    )


_pricings: dict[tuple[str, str, bool], Pricing | None] = {}
_batch_rates: dict[Pricing, Pricing] = {}  # a declared pricing's batch form, made once


def pricing_of(model: Model, *, batch: bool = False) -> Pricing | None:
    """The model's declared pricing, else genai-prices' (None: unknown); with `batch`,
    the rates of its provider's batch API (`Pricing.for_batch`)."""
    declared = _declared(model)
    if declared is not None:
        if not batch:
            return declared
        rates = _batch_rates.get(declared)
        if rates is None:
            rates = _batch_rates[declared] = declared.for_batch()
        return rates
    key = (model.provider, model.name, batch)
    if key not in _pricings:
        _pricings[key] = lookup_pricing(model.provider, model.name, batch=batch)
    return _pricings[key]


def _declared(model: Model) -> Pricing | None:
    provider = as_provider_model(model)
    return None if provider is None else provider.declared_pricing()


def worst_case(
    model: Model, messages: Sequence[Message], options: ModelOptions, *, batch: bool = False
) -> tuple[Amount, Pricing | None]:
    """A request's worst case, before it is sent: its prompt estimated from its JSON
    (bytes / 4, more than a tokenizer counts), plus its output cap (`max_tokens`, else
    the adapter's default, else `DEFAULT_OUTPUT_RESERVE`), at the model's highest input
    and output rates (`batch`: its provider batch API's); and the pricing used (None:
    unknown, 0 USD reserved)."""
    prompt_count, cap = estimate(messages, options, model)
    prompt, output = float(prompt_count), float(cap)
    pricing = pricing_of(model, batch=batch)
    if pricing is not None and not batch and "priority" in _tiers_asked(model, options):
        pricing = _priority_rates(model, pricing)  # served at priority, it costs more
    usd = 0.0
    if pricing is not None:
        input_rate = max(
            pricing.input_per_mtok,
            pricing.cache_write_per_mtok or 0.0,
            pricing.cache_write_1h_per_mtok or 0.0,
        )
        output_rate = max(pricing.output_per_mtok, pricing.reasoning_per_mtok or 0.0)
        usd = (prompt * input_rate + output * output_rate) / _PER_MTOK
    return (usd, prompt + output, prompt, output, 1.0), pricing


def _tiers_asked(model: Model, options: ModelOptions) -> tuple[str | None, ...]:
    """The tiers a request may be served at: the one it asks for and its fallback."""
    tier = options.service_tier
    if tier is None:
        provider = as_provider_model(model)
        tier = None if provider is None else provider.default_tier()
    if isinstance(tier, Tier):
        return (tier.tier, tier.fallback)
    return (tier if isinstance(tier, str) else None,)


def _priority_rates(model: Model, online: Pricing) -> Pricing:
    declared = _declared(model)
    if declared is not None:
        return declared.for_tier("priority")
    return lookup_pricing(model.provider, model.name, tier="priority") or online


class Account:
    """Limits, what is reserved and what is spent, per dimension (plain lists: a request
    costs a few float operations). `limits` may grow (a Ray holder's granted slices)."""

    __slots__ = ("limits", "reserved", "spent")

    def __init__(self, limits: Sequence[float]) -> None:
        self.limits = list(limits)
        self.reserved = [0.0] * 5
        self.spent = [0.0] * 5

    def short(self, amount: Sequence[float], *, in_flight: bool = True) -> int | None:
        """The first dimension `amount` does not fit in (None: it fits); with
        `in_flight=False`, as if the reservations in flight were settled at nothing
        (what a request can wait for)."""
        limits, reserved, spent = self.limits, self.reserved, self.spent
        for i in range(5):
            held = spent[i] + reserved[i] if in_flight else spent[i]
            if amount[i] > 0 and held + amount[i] > limits[i] + 1e-12:
                return i
        return None

    @property
    def busy(self) -> bool:
        """Whether reservations are in flight."""
        return any(r > 1e-12 for r in self.reserved)

    def room(self) -> Amount:
        return tuple(  # type: ignore[return-value]
            self.limits[i] - self.spent[i] - self.reserved[i] for i in range(5)
        )

    def reserve(self, amount: Sequence[float]) -> None:
        reserved = self.reserved
        for i in range(5):
            reserved[i] += amount[i]

    def settle(self, amount: Sequence[float], actual: Sequence[float]) -> None:
        reserved, spent = self.reserved, self.spent
        for i in range(5):
            reserved[i] -= amount[i]
            spent[i] += actual[i]

    def exceeded(self, amount: Sequence[float], dimension: int, scope: str) -> BudgetExceededError:
        name = DIMENSIONS[dimension]
        return BudgetExceededError(
            f"the {scope} budget's {name} would be exceeded: {amount[dimension]:.6g} more "
            f"needed, {self.spent[dimension]:.6g} spent and {self.reserved[dimension]:.6g} "
            f"reserved of {self.limits[dimension]:.6g}; the request was not sent",
            budget=scope,
            dimension=name,
            limit=self.limits[dimension],
            spent=self.spent[dimension],
            reserved=self.reserved[dimension],
            needed=amount[dimension],
        )


class BudgetLedger(Protocol):
    """A budget as the requests of a run see it: reserve before a request, settle after.

    `exhausted` is the error of the first reservation that did not fit (a batch starts no
    new item after it). Locally a `LocalBudgetLedger`; on Ray a job's ledger is a holder's
    lease on the budget its gateway keeps."""

    budget: Budget
    scope: str

    @property
    def exhausted(self) -> BudgetExceededError | None: ...

    async def reserve(self, amount: Amount) -> None:
        """Reserve `amount`, or raise BudgetExceededError (nothing reserved)."""

    def settle(self, amount: Amount, actual: Amount) -> None:
        """The request reserved with `amount` ended having spent `actual`."""

    async def standing(self) -> tuple[Amount, Amount]:
        """(spent, reserved) as this ledger knows them."""


class LocalBudgetLedger:
    """A budget held in this process (a run's, or a job's on the local backend).

    A request that does not fit beside the reservations in flight waits for them to
    settle (they usually spend less than their worst case); one that would not fit even
    with none in flight fails at once, and the budget is exhausted."""

    __slots__ = ("_waiters", "account", "budget", "exhausted", "scope")

    def __init__(self, budget: Budget, scope: str = "run") -> None:
        self.budget = budget
        self.scope = scope
        self.account = Account(budget.limits)
        self.exhausted: BudgetExceededError | None = None
        self._waiters: list[asyncio.Future[None]] = []

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy elsewhere (another process) starts afresh: hold a job's budget across
        # processes through the backend's `budgets` (Ray: its gateway).
        return (type(self), (self.budget, self.scope))

    async def reserve(self, amount: Amount) -> None:
        account = self.account
        while (short := account.short(amount)) is not None:
            never = account.short(amount, in_flight=False)
            if never is not None or not account.busy:
                error = account.exceeded(amount, short if never is None else never, self.scope)
                self.exhausted = self.exhausted or error
                raise error
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        account.reserve(amount)

    def settle(self, amount: Amount, actual: Amount) -> None:
        self.account.settle(amount, actual)
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def standing(self) -> tuple[Amount, Amount]:
        account = self.account
        return tuple(account.spent), tuple(account.reserved)  # type: ignore[return-value]


class LocalBudgets:
    """The local backend's `budgets`: a job's budget is a ledger in this process."""

    def job(self, budget: Budget, key: str) -> BudgetLedger:
        return LocalBudgetLedger(budget, "job")
