"""`ProviderBatch`: the options of a job whose model trips go through the providers'
batch APIs (half the price, answered within 24 hours), and what its report lists."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ProviderBatch", "ProviderBatchInfo", "ProviderBatchSummary"]


class ProviderBatch(BaseModel):
    """How a batch job sends its runs' model trips through the providers' batch APIs.

    `raygent.batch(agent, items, provider_batch=True)` uses the defaults. Each in-flight
    run's next trip becomes one line of the current provider batch (its `custom_id`
    names the item, the attempt and the trip); the reply goes back to that run, whose
    next trip goes into a following batch. Models: `OpenAIModel` (`/v1/chat/completions`),
    `OpenAIResponsesModel` (`/v1/responses`), `AnthropicModel` (Message Batches),
    `BedrockModel` with `batch=` (batch inference jobs: 100 records at least).

    max_lines: the most lines of one provider batch (default: the provider's own
        limits, OpenAI 50,000 lines and 200 MB a file, Anthropic 100,000 requests and
        256 MB; a bigger group is split).
    max_waiting: the most items of the job in flight at once, running or waiting for
        their lines (default: the most lines of one batch, so that every item in flight
        joins one batch per trip). A waiting run holds memory only, no connection: this
        bounds memory, not the provider; `concurrency` bounds the runs working at once
        (tools, online trips). A job of more items than this is warned that its trips
        go in several batches.
    gather_seconds: how long trips are gathered before a partial batch is sent: it goes
        once no trip joined it for that long (at most 12 times that after its first).
    poll_seconds: how often a batch that is out is polled (with jitter; backing off on
        errors, a Retry-After honoured).
    on_expired: what a line the provider did not answer (its batch expired or was
        cancelled) becomes: "retry" sends it again in a later batch, "online" sends it
        online now, "fail" ends its trip with `ProviderBatchExpiredError`.
    cancel_on_interrupt: on Ctrl-C (or the job's signal) cancel the batches that are
        out; else they are left for a resumed job to collect.
    fallback: where a fallback model's next models are asked once a line of the one
        before failed: "batch" (their batch APIs, where they have one, else online) or
        "online" (at once, at the online price).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_lines: int | None = Field(default=None, ge=1)
    max_waiting: int | None = Field(default=None, ge=1)
    gather_seconds: float = Field(default=5.0, ge=0)
    poll_seconds: float = Field(default=30.0, gt=0)
    on_expired: Literal["retry", "online", "fail"] = "retry"
    cancel_on_interrupt: bool = True
    fallback: Literal["batch", "online"] = "batch"


class ProviderBatchInfo(BaseModel):
    """One provider batch a job sent."""

    id: str
    provider: str
    lines: int
    status: str
    created: datetime
    ended: datetime | None = None


class ProviderBatchSummary(BaseModel):
    """What a job sent by batch: every provider batch, and its cost beside what the same
    replies would have cost online (both in USD; None where a model's price is unknown)."""

    batches: list[ProviderBatchInfo] = Field(default_factory=list)
    lines: int = 0
    online_lines: int = 0  # trips that went online instead (a deadline, on_expired)
    # Why lines went online when the job did not ask it (a batch under its API's minimum).
    notes: list[str] = Field(default_factory=list)
    cost: float | None = None
    online_cost: float | None = None
