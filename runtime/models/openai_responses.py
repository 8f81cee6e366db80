"""The OpenAI Responses API (`/v1/responses`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from typing_extensions import Unpack

from ..messages import Message
from . import _responses_wire as wire
from ._wire import Reply
from .contract import ModelOptions
from .openai import _OpenAIBase
from .tiers import OpenAISettings

__all__ = ["OpenAIResponsesModel"]


class OpenAIResponsesModel(_OpenAIBase):
    """A model over the OpenAI Responses API.

    `base_url` is what the official SDK takes (ends in `/v1`; else `OPENAI_BASE_URL`);
    the key comes from `api_key` or `OPENAI_API_KEY`. With `store=False` (the default)
    nothing is kept by OpenAI: a reasoning model's reasoning comes back encrypted
    (`include=["reasoning.encrypted_content"]`) as opaque provider blocks, replayed
    verbatim on the next trip. Capabilities are inferred from the name as for
    `OpenAIModel`. `ModelOptions.provider_options["openai_responses"]` is merged into
    the request body. `service_tier`, `prompt_cache_key` and `prompt_cache_retention`:
    see `OpenAISettings`.
    """

    def __init__(
        self, name: str, *, store: bool = False, **settings: Unpack[OpenAISettings]
    ) -> None:
        super().__init__(name, **settings)
        self.store = store

    def request_path(self, *, stream: bool) -> str:
        return "/responses"

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        return wire.request_body(
            self.name, messages, options, self.capabilities, stream=stream, store=self.store
        )

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        return wire.reply_of(data)

    def stream_feeder(self) -> wire.StreamState:
        return wire.StreamState()
