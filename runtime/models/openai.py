"""OpenAI Chat Completions, and any OpenAI-compatible server (vLLM, Ollama, LM Studio)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import Unpack

from ..messages import Message
from . import _openai_wire as wire
from ._http import HTTPModel
from ._wire import Reply
from .batch_api import BatchAPI, OpenAIBatchAPI
from .contract import Capabilities, ModelOptions
from .tiers import OpenAISettings, openai_options

if TYPE_CHECKING:
    from ._http import ModelSettings

__all__ = ["OpenAIModel"]

_REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")
# Chat models that take no images; every other name is assumed to (gpt-4o, gpt-4.1,
# gpt-4-turbo, o1, o3, o4-mini, gpt-5 and unknown local models).
_TEXT_ONLY_MODELS = re.compile(
    r"^(?:gpt-3\.5|gpt-4(?:-32k)?(?:-\d{4})?$|gpt-4-(?:1106|0125)-preview|gpt-4-turbo-preview"
    r"|o1-mini|o1-preview|o3-mini|gpt-oss|text-|davinci|babbage|curie|ada(?:$|-))"
)


class _OpenAIBase(HTTPModel):
    """What OpenAI's two wires (Chat Completions, Responses) share: the key and its
    header, the settings they send with every request (`OpenAISettings`), what a model
    can do by its name, and the Batch API under an OpenAI-style `/v1` root."""

    provider = "openai"
    env_key = "OPENAI_API_KEY"
    env_base_url = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    settings_type = OpenAISettings

    def __init__(self, name: str, **settings: Unpack[OpenAISettings]) -> None:
        super().__init__(name, **cast("ModelSettings", settings))  # checked there in full
        self.service_tier = settings.get("service_tier")
        self.prompt_cache_key = settings.get("prompt_cache_key")
        self.prompt_cache_retention = settings.get("prompt_cache_retention")

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        bare = name.rsplit("/", 1)[-1].removeprefix("ft:")  # "openai/gpt-4o", "ft:gpt-3.5-..."
        return Capabilities(
            reasoning=bool(_REASONING_MODELS.match(name)),
            prompt_caching=True,
            vision=not _TEXT_ONLY_MODELS.match(bare),
        )

    def _auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def call_options(self, options: ModelOptions | None) -> ModelOptions:
        return openai_options(self, options)

    def batch_api(self) -> BatchAPI | None:
        """The OpenAI Batch API for this model's requests (None where its base URL is
        not an OpenAI-style `/v1` root: no batch endpoint to name). Every reply shape
        `complete` reads, a batch line's reply is read as (`batch_reply`)."""
        if not self.base_url.endswith("/v1"):
            return None
        return OpenAIBatchAPI(self, "/v1" + self.request_path(stream=False))


class OpenAIModel(_OpenAIBase):
    """A Chat Completions model.

    `base_url` is what the official SDK takes (ends in `/v1`; else `OPENAI_BASE_URL`, as
    the SDK reads). The key comes from `api_key` or `OPENAI_API_KEY`. `max_tokens_field`
    is `max_completion_tokens` on api.openai.com and `max_tokens` elsewhere, unless given.
    `vision` is inferred from the name (text-only: gpt-3.5, gpt-4 base, o1-mini,
    o1-preview, o3-mini, ...); an explicit `vision=` wins, over `capabilities=` too. `service_tier`,
    `prompt_cache_key` and `prompt_cache_retention`: see `OpenAISettings`.
    """

    def __init__(
        self,
        name: str,
        *,
        max_tokens_field: str | None = None,
        vision: bool | None = None,
        **settings: Unpack[OpenAISettings],
    ) -> None:
        super().__init__(name, **settings)
        if vision is not None:
            self.capabilities = self.capabilities.model_copy(update={"vision": vision})
        if max_tokens_field is None:
            official = "api.openai.com" in self.base_url
            max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.max_tokens_field = max_tokens_field

    def request_path(self, *, stream: bool) -> str:
        return "/chat/completions"

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        return wire.request_body(
            self.name,
            messages,
            options,
            self.capabilities,
            stream=stream,
            max_tokens_field=self.max_tokens_field,
        )

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        return wire.reply_of(data)

    def stream_feeder(self) -> wire.StreamState:
        return wire.StreamState()
