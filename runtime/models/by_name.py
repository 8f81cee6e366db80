"""A model named `PROVIDER:NAME`, as peers and the command line name one
(`"openai:gpt-4o-mini"`, `"gemini:gemini-2.5-flash"`,
`"bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0"`): the provider's adapter built
with the settings given and, for the rest, what the provider's own SDK reads from the
environment (its key, its base URL; AWS's credential chain and region).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InvalidOptionsError
from ._names import PYTHON, Spelling, unknown_option
from .anthropic import AnthropicModel
from .bedrock import BedrockModel
from .contract import Model
from .gemini import GeminiModel
from .openai import OpenAIModel
from .openai_responses import OpenAIResponsesModel

__all__ = ["PROVIDERS", "adapter_of", "model_from_name"]


def _vertex(name: str, **settings: Any) -> Model:
    return GeminiModel(name, vertex=True, **settings)


# The provider words a name may start with, each with the adapter it builds.
PROVIDERS: dict[str, Callable[..., Model]] = {
    "openai": OpenAIModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
    "gemini": GeminiModel,
    "vertex": _vertex,
    "bedrock": BedrockModel,
}

# Other libraries' words for the same providers (pydantic-ai, LiteLLM, google-genai).
_ALIASES = {
    "google_gla": "gemini",
    "google": "gemini",
    "google_genai": "gemini",
    "google_vertex": "vertex",
    "vertex_ai": "vertex",
    "vertexai": "vertex",
    "aws_bedrock": "bedrock",
    "amazon_bedrock": "bedrock",
    "openai_responses": "openai-responses",
    "responses": "openai-responses",
    "claude": "anthropic",
}


def model_from_name(spec: str, **settings: Any) -> Model:
    """The model `spec` (`PROVIDER:NAME`) names, built with `settings` (the adapter's
    own: `api_key=`, `base_url=`, `rate_limit=`, ...). A provider word no adapter has
    is refused (`UnknownOptionError`, naming the closest); a spec with no provider or
    no name, `InvalidOptionsError`. Only the first `:` splits: Bedrock's ids hold one."""
    build, name = adapter_of(spec, subject=repr(spec))
    return build(name, **settings)


def adapter_of(
    spec: str, *, subject: str, spelling: Spelling = PYTHON
) -> tuple[Callable[..., Model], str]:
    """What builds the model `spec` names, and its name (see `model_from_name`);
    refusals name `subject`, spelt for who reads them."""
    if not isinstance(spec, str):
        raise TypeError(f"a model name is a string 'PROVIDER:NAME', not {type(spec).__name__}")
    provider, sep, name = spec.partition(":")
    provider = provider.strip().lower()
    if not sep or not provider or not name.strip():
        raise InvalidOptionsError(
            f"{subject}: a model is named PROVIDER:NAME (e.g. openai:gpt-4o-mini; providers: "
            f"{', '.join(PROVIDERS)})",
            option="model",
        )
    build = PROVIDERS.get(provider)
    if build is None:
        alias = _ALIASES.get(provider.replace("-", "_"))
        if alias is None:
            raise unknown_option(
                provider, list(PROVIDERS), subject=subject, what="provider", spelling=spelling
            )
        build = PROVIDERS[alias]
    return build, name.strip()
