"""Token usage and its cost, per channel, computed when the usage is produced."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Cost", "Usage", "dollars", "merged_models", "total_cost"]


class Cost(BaseModel):
    """Cost in USD per channel. Channels never overlap, so their sum is the total."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0
    cache_write: float = 0.0
    reasoning: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.output + self.cached_input + self.cache_write + self.reasoning

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            input=self.input + other.input,
            output=self.output + other.output,
            cached_input=self.cached_input + other.cached_input,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )


class Usage(BaseModel):
    """Tokens used by one or more model requests, and what they cost.

    `input_includes_cache` says whether `input_tokens` counts cached and cache-write
    tokens (OpenAI) or not (Anthropic). `output_tokens` includes `reasoning_tokens`.
    `cost` is None when the pricing is unknown (never 0 for "unknown"); it is fixed when
    the usage is produced and kept as a historical fact.

    `other_models`: the part of these tokens (and of `cost`) that models other than the
    request's own spent inside it, by model name, each priced at its own model's rates:
    Anthropic's advisor tool runs a second model within a request and reports it in
    `usage.iterations`. Their tokens are counted in the fields above too; unset (and
    left out of the JSON) when no other model ran.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    input_includes_cache: bool = True
    cost: Cost | None = None
    other_models: dict[str, Usage] | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def total_tokens(self) -> int:
        """All input tokens (cached included) plus output tokens."""
        return self.total_input_tokens + self.output_tokens

    @property
    def total_input_tokens(self) -> int:
        """Input tokens with cached and cache-write tokens included, whichever the convention."""
        if self.input_includes_cache:
            return self.input_tokens
        return self.input_tokens + self.cached_tokens + self.cache_write_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens billed at the plain input rate."""
        if self.input_includes_cache:
            return max(0, self.input_tokens - self.cached_tokens - self.cache_write_tokens)
        return self.input_tokens

    def _is_empty(self) -> bool:
        return self.requests == 0 and self.total_tokens == 0 and self.cost is None

    def __add__(self, other: Usage) -> Usage:
        if self._is_empty():
            return other
        if other._is_empty():
            return self
        same = self.input_includes_cache == other.input_includes_cache
        if same:
            input_tokens = self.input_tokens + other.input_tokens
        else:
            input_tokens = self.total_input_tokens + other.total_input_tokens
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        others = self.other_models
        if other.other_models is not None:
            others = merged_models(others, other.other_models)
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            input_includes_cache=self.input_includes_cache if same else True,
            cost=cost,
            other_models=others,
        )

    def __radd__(self, other: object) -> Usage:
        # Lets sum(usages) work: sum starts from 0.
        if other == 0:
            return self
        return NotImplemented


def merged_models(mine: dict[str, Usage] | None, theirs: dict[str, Usage]) -> dict[str, Usage]:
    """Two usages' `other_models` summed, model by model."""
    merged = dict(mine or {})
    for name, usage in theirs.items():
        merged[name] = merged[name] + usage if name in merged else usage
    return merged


def total_cost(cost: Cost | Usage | None) -> float | None:
    """The total in USD of a cost (or of a usage's cost); None when it is unknown."""
    if isinstance(cost, Usage):
        cost = cost.cost
    return None if cost is None else cost.total


def dollars(amount: float) -> str:
    """USD as people read it: cents from a dollar up (`$1,234.50`), and below a dollar
    two significant digits at least (`$0.42`, `$0.015`, `$0.0042`): an amount under a
    cent never shows as `$0.00` or `$0.01`."""
    if amount != amount:  # NaN
        return "$?"
    sign = "-" if amount < 0 and round(amount, 12) != 0 else ""
    size = abs(amount)
    if size >= 1 or size < 1e-12:
        return f"{sign}${size:,.2f}"
    places = min(12, max(2, 1 - math.floor(math.log10(size))))
    return f"{sign}${size:.{places}f}"
