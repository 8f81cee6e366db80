"""Anthropic Messages API."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import Unpack

from .._message_input import MessageLike
from ..abort import AbortSignal
from ..messages import Message
from . import _anthropic_wire as wire
from ._http import HTTPModel
from ._wire import Reply
from .batch_api import AnthropicBatchAPI, BatchAPI
from .contract import Capabilities, ModelOptions
from .tiers import AnthropicSettings

if TYPE_CHECKING:
    from ._http import ModelSettings

__all__ = ["AnthropicModel"]

_THINKING_MODELS = re.compile(r"claude-(3-7|(opus|sonnet|haiku)-4|4)")
# The models Anthropic's reference lists for server-side compaction (compact_20260112).
_COMPACTING_MODELS = re.compile(
    r"claude-(fable-5(-1)?|mythos-(5(-1)?|preview)|opus-(5(-5)?|4-[678])"
    r"|sonnet-(5(-5)?|4-6)|haiku-5-5)(-\d{8})?$"
)
# What a token count's body leaves out of a message request's.
_NOT_COUNTED = ("max_tokens", "stream", "temperature", "metadata")


class AnthropicModel(HTTPModel):
    """A Claude model over the Messages API.

    `base_url` is what the official SDK takes (no `/v1`; else `ANTHROPIC_BASE_URL`, as the
    SDK reads). The key comes from `api_key` or `ANTHROPIC_API_KEY`. `default_max_tokens`
    is sent when a request gives none (the API requires one). `service_tier`: see
    `AnthropicSettings`; a reply is priced at the tier its `usage.service_tier` names.
    """

    provider = "anthropic"
    env_key = "ANTHROPIC_API_KEY"
    env_base_url = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    settings_type = AnthropicSettings

    def __init__(
        self, name: str, *, default_max_tokens: int = 4096, **settings: Unpack[AnthropicSettings]
    ) -> None:
        super().__init__(name, **cast("ModelSettings", settings))  # checked there in full
        self.default_max_tokens = default_max_tokens
        self.service_tier = settings.get("service_tier")

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        # The Messages API of the current SDK declares no `temperature`; pass
        # `Capabilities(temperature=True, ...)` for an older model that takes one.
        return Capabilities(
            structured_output=False,
            reasoning=bool(_THINKING_MODELS.search(name)),
            prompt_caching=True,
            temperature=False,
            server_compaction=bool(_COMPACTING_MODELS.match(name)),
        )

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": wire.API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def request_path(self, *, stream: bool) -> str:
        return "/v1/messages"

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        return wire.request_body(
            self.name,
            messages,
            options,
            self.capabilities,
            stream=stream,
            default_max_tokens=self.default_max_tokens,
        )

    def body_headers(self, body: dict[str, Any]) -> Mapping[str, str] | None:
        return wire.beta_headers(body, self.extra_headers.get("anthropic-beta"))

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        return wire.reply_of(data)

    def stream_feeder(self) -> wire.StreamState:
        return wire.StreamState()

    def batch_api(self) -> BatchAPI | None:
        """Anthropic's Message Batches API for this model's requests."""
        return AnthropicBatchAPI(self)

    async def count_tokens(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> int:
        """Input tokens of a request, counted by the provider (no generation, no cost)."""
        body = self.request_body(messages, options, stream=False)
        for key in _NOT_COUNTED:
            body.pop(key, None)
        data, status = await self._post_json("/v1/messages/count_tokens", body, signal)
        tokens = data.get("input_tokens")
        if not isinstance(tokens, int):
            raise self._bad_reply(status, "count_tokens reply without input_tokens")
        return tokens
