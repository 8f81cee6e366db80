"""The requests a job's runs would send, checked unsent: against what each model can do,
and against what its provider accepts, on the body its adapter would build."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ...messages import ImagePart, Message
from ...models.contract import Model, ModelOptions
from ...seams.planned import PlannedRequest
from .problems import Problem, from_error
from .schemas import body_problems

__all__ = ["WireModel", "request_problems"]


@runtime_checkable
class WireModel(Protocol):
    """A model whose adapter says what it would send (raygent's HTTP adapters)."""

    provider: str
    base_url: str

    def request_body(
        self, messages: Sequence[Message], options: ModelOptions | None, *, stream: bool
    ) -> dict[str, Any]: ...


def request_problems(request: PlannedRequest) -> list[Problem]:
    """What each model of `request` (a fallback's every model) cannot do or would be
    refused."""
    problems: list[Problem] = []
    for model in _models(request.model):
        at = f"{request.source}, {model.provider} model {model.name!r}"
        problems.extend(_capabilities(request, model, at))
        if not isinstance(model, WireModel):
            continue
        messages = list(request.messages)
        if not model.capabilities.vision:
            messages = [_without_images(m) for m in messages]  # refused above already
        try:
            body = model.request_body(messages, request.options, stream=False)
        except Exception as exc:
            problems.append(from_error(exc, at))
            continue
        problems.extend(body_problems(model.provider, model.base_url, body, at))
    return problems


def _capabilities(request: PlannedRequest, model: Model, at: str) -> list[Problem]:
    """What the run asks that the model cannot do (the agent refuses its own model's
    missing server compaction itself; a fallback's other models are checked here)."""
    caps = model.capabilities
    options = request.options
    problems = []
    if options.tools and not caps.tools:
        names = ", ".join(t.name for t in options.tools)
        problems.append(
            Problem(
                f"{at}: tools",
                f"the agent has tools ({names}) and the model cannot call tools: it would "
                "never see them",
                "use a model that calls tools (or Capabilities(tools=True) on one that can)",
            )
        )
    if options.server_compaction is not None and not caps.server_compaction:
        problems.append(
            Problem(
                f"{at}: server_compaction",
                "the model cannot compact its context on the provider's side",
                "leave server_compaction out, or use a model Anthropic lists for it",
            )
        )
    images = sum(isinstance(p, ImagePart) for m in request.messages for p in m.content)
    if images and not caps.vision:
        problems.append(
            Problem(
                f"{at}: attachments",
                f"{images} image attachment{'s' if images != 1 else ''} and the model has no "
                "vision: it cannot take images",
                "use a model with vision (vision=True on a model that has it), or leave the "
                "images out",
            )
        )
    return problems


def _models(model: Model) -> list[Model]:
    """A fallback's models, or the model."""
    return list(getattr(model, "models", None) or [model])


def _without_images(message: Message) -> Message:
    kept = [p for p in message.content if not isinstance(p, ImagePart)]
    return (
        message
        if len(kept) == len(message.content)
        else message.model_copy(update={"content": kept})
    )
