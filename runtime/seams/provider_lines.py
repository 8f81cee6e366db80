"""Provider-batch lines: how a run's model trips leave as lines of a provider batch.

A batch job run with `provider_batch=` sets, around each attempt of an item, the
`TripLines` of that attempt; a trip made inside it gets a request path (see
`request_path`) whose route asks `by_batch` where each request goes, and sends the ones
that go by batch through `sender(trip)`, each a line of the provider's batch API (the
rest go online, through the backend's own access). Unset, trips go online.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from ..models.contract import Model, ModelOptions
from .contract import ModelAccess

__all__ = ["SendOnline", "TripLines", "current_lines"]


class SendOnline(Exception):
    """A line its provider did not answer (its batch expired or was cancelled) that is
    to be sent online now (`on_expired="online"`): it was never billed."""


class TripLines(Protocol):
    """One attempt's way to its job's provider batches."""

    def by_batch(self, model: Model, *, first: bool) -> bool:
        """Whether a request to `model` goes by batch (`first`: the trip's first
        request, not a fallback's next model); asked once per request."""
        ...

    def sender(self, trip: int) -> ModelAccess:
        """Trip number `trip`'s requests as lines (raises `SendOnline` for a line to send
        online after all)."""
        ...

    def note_online(self) -> None:
        """A request of the job went online."""
        ...

    def online_options(self, model: Model, options: ModelOptions) -> ModelOptions:
        """The options of a request that goes online (a job with a deadline: at the
        service tier its route chooses)."""
        ...


current_lines: ContextVar[TripLines | None] = ContextVar("raygent_trip_lines", default=None)
