"""What a run would use, unsent: the request an executable's run would send first and
the stores it would read and write, for the run options it is given.

A batch job checks them (`raygent._batch.preflight`) before its first paid request and
before anything is written to its sink: the request against what its models can do and
what their providers accept, the stores by a round trip. An executable offers this by
`plan_run` (`Plannable`; an agent does); a flow's agents are planned one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from ..messages import Message
from ..models.contract import Model, ModelOptions

__all__ = ["STAND_IN", "Plannable", "PlannedRequest", "RunPlan", "StoreUse"]

# The text a planned request carries where an item's input would be.
STAND_IN = "(an item's input)"
# What a run keeps in a store: conversations (memory=), durable runs, cached replies.
StoreUse: TypeAlias = Literal["memory", "durable", "cache"]


@dataclass(frozen=True)
class PlannedRequest:
    """The first request of a run, unsent: who would send it (`source`, e.g. "agent
    'triage'"), to which model (a fallback: each of its models would get it), with which
    options, and its messages (the run's system prompt; its user message holds
    `STAND_IN` and the run's attachments)."""

    source: str
    model: Model
    options: ModelOptions
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class RunPlan:
    """What a run would use first: its requests, and the stores it would read and write,
    each with what it keeps there."""

    requests: tuple[PlannedRequest, ...] = ()
    stores: tuple[tuple[StoreUse, Any], ...] = ()


@runtime_checkable
class Plannable(Protocol):
    """An executable that can say what a run of it would use, without running."""

    name: str

    def plan_run(self, run_options: Mapping[str, Any]) -> RunPlan:
        """What a run with `run_options` would use, unsent and unwritten. Raises what
        the run would fail with before sending: an invalid option value (pydantic's
        ValidationError, located), a capability the model lacks, a prompt it cannot
        build."""
        ...
