"""Provider-batch lines: how a run's model trips leave as lines of a provider batch.

A batch job run with `provider_batch=` gives each attempt of an item its `TripLines`
(in the run's scope, `seams.attempt.RunScope`); a trip of that run gets a request path
(see `request_path`) whose route asks `by_batch` where each request goes, and sends the
ones that go by batch through `sender(trip)`, each a line of the provider's batch API
(the rest go online, through the backend's own access). A run with no lines goes online.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from ..models.contract import LineResult, Model, ModelOptions
from .request import ModelAccess

__all__ = ["LineAnswer", "LineCost", "LineOptions", "SendOnline", "TripLines"]

# A line's answer: its bytes from its batch's results (read where the run is), or a
# failure the pool made (the batch was refused, ended without it); and the batch's id.
LineAnswer: TypeAlias = tuple[bytes | LineResult, str]


@dataclass(slots=True)
class LineCost:
    """What lines cost (USD, at batch rates), what they would have online, and how
    many trips went online instead."""

    cost: float | None = None
    online_cost: float | None = None
    online_lines: int = 0

    def add(self, other: LineCost) -> None:
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost
        if other.online_cost is not None:
            self.online_cost = (self.online_cost or 0.0) + other.online_cost
        self.online_lines += other.online_lines


class LineOptions(Protocol):
    """What an attempt's lines read of their job's options (`raygent.ProviderBatch`)."""

    @property
    def gather_seconds(self) -> float: ...

    @property
    def poll_seconds(self) -> float: ...

    @property
    def on_expired(self) -> Literal["retry", "online", "fail"]: ...

    @property
    def fallback(self) -> Literal["batch", "online"]: ...


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

    def online_options(self, model: Model, options: ModelOptions) -> ModelOptions:
        """The options of a request that goes online (a job with a deadline: at the
        service tier its route chooses)."""
        ...
