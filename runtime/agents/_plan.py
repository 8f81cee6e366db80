"""What a run would use, unsent (`Agent.plan_run`, see `raygent.seams.planned`): its
first request, the item's input stood in for and its image attachments kept by kind
(never fetched), and the stores it would read and write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..attachments import parse_attachments
from ..cache import ResponseCache
from ..durable.options import Durable
from ..memory import Memory
from ..messages import ContentPart, ImagePart, SystemMessage, TextPart, UserMessage
from ..models.contract import Model, ModelOptions
from ..seams.planned import STAND_IN, PlannedRequest, RunPlan, StoreUse

__all__ = ["RunPlan", "first_request", "stores_of"]

# A planned request's image attachment: its kind counts, not its bytes.
PLANNED_IMAGE = "https://raygent.invalid/attachment.png"


def first_request(
    source: str,
    model: Model,
    options: ModelOptions,
    system: str,
    run_options: Mapping[str, Any],
) -> PlannedRequest:
    """The run's first request: its system text, then a user message of its image
    attachments (`run_options`') and the stand-in for the item's input."""
    images: list[ContentPart] = [
        ImagePart(url=PLANNED_IMAGE)
        for each in parse_attachments(run_options.get("attachments") or ())
        if each.kind == "image"
    ]
    user = UserMessage(content=[*images, TextPart(text=STAND_IN)])
    messages = (SystemMessage(content=system), user) if system else (user,)
    return PlannedRequest(source, model, options, messages)


def stores_of(
    memory: Memory | None, durable: Durable | None, cache: ResponseCache | None
) -> tuple[tuple[StoreUse, Any], ...]:
    """The stores a run keeps its conversation, its durable state and its cached
    replies in (a cache without a store lives in each process: nothing to reach)."""
    uses: list[tuple[StoreUse, Any]] = [
        ("memory", memory.store if memory else None),
        ("durable", durable.store if durable else None),
        ("cache", cache.store if cache else None),
    ]
    return tuple((use, store) for use, store in uses if store is not None)
