"""Provider-batch lines: how a run's model trips leave as lines of a provider batch.

A batch job run with `provider_batch=` gives each attempt of an item its `TripLines`
(in the run's scope, `seams.attempt.RunScope`); a trip of that run gets a request path
(see `request_path`) whose route asks `by_batch` where each request goes, and sends the
ones that go by batch through `sender(trip)`, each a line of the provider's batch API
(the rest go online, through the backend's own access). A run with no lines goes online.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..models.contract import Model

if TYPE_CHECKING:
    from .contract import ModelAccess

__all__ = ["SendOnline", "TripLines"]


class SendOnline(Exception):
    """A line its provider did not answer (its batch expired or was cancelled) that is
    to be sent online now (`on_expired="online"`): it was never billed."""


class TripLines(Protocol):
    """One attempt's way to its job's provider batches."""

    @property
    def deadline(self) -> float | None:
        """When the item must be done (`time.time()`; None: no deadline)."""
        ...

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
