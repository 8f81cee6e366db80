"""Provider-batch lines: how a run's model trips leave as lines of a provider batch.

A batch job run with `provider_batch=` sets, around each attempt of an item, the
`TripLines` of that attempt; a model trip made inside it asks `access(...)` for the
model access to use, which sends each request as a line of the provider's batch API
(and the rest online, through the backend's own access). Unset, trips go online.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from .contract import ModelAccess

__all__ = ["TripLines", "current_lines"]


class TripLines(Protocol):
    """One attempt's way to its job's provider batches."""

    def access(self, online: ModelAccess, trip: int) -> ModelAccess:
        """The model access of trip number `trip`; `online` serves what cannot go by batch."""
        ...


current_lines: ContextVar[TripLines | None] = ContextVar("raygent_trip_lines", default=None)
