"""Service tiers and prompt-cache keys on the wire (issue 40.2-40.4), checked against the
official SDKs' request types; and a misspelt model setting refused on every adapter
(issue 40.6)."""

from __future__ import annotations

import inspect
from typing import Any

import botocore.session
import pytest
from _sdk_types import assert_conforms
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from botocore.validate import ParamValidator
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming,
    ResponseCreateParamsStreaming,
)

import raygent
from raygent import ModelOptions, UserMessage
from raygent.models._http import HTTPModel

KEY = "sk-tier-test-123456"
ASK = [UserMessage(content="hi")]
PARAMS: dict[tuple[str, bool], type] = {
    ("openai", False): CompletionCreateParamsNonStreaming,
    ("openai", True): CompletionCreateParamsStreaming,
    ("openai_responses", False): ResponseCreateParamsNonStreaming,
    ("openai_responses", True): ResponseCreateParamsStreaming,
    ("anthropic", False): MessageCreateParamsNonStreaming,
    ("anthropic", True): MessageCreateParamsStreaming,
}
CLASSES: dict[str, type[HTTPModel]] = {
    "openai": raygent.OpenAIModel,
    "openai_responses": raygent.OpenAIResponsesModel,
    "anthropic": raygent.AnthropicModel,
    "gemini": raygent.GeminiModel,
}


def _adapters() -> list[type[HTTPModel]]:
    """Every HTTP adapter raygent has (subclasses of subclasses too; not a base a family
    of wires shares, which states no wire of its own, nor a test's own wire)."""
    found: list[type[HTTPModel]] = []
    todo = list(HTTPModel.__subclasses__())
    while todo:
        cls = todo.pop()
        if not inspect.isabstract(cls) and cls.__module__.startswith("raygent."):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tier", ["auto", "default", "flex", "priority"])
@pytest.mark.parametrize("kind", ["openai", "openai_responses"])
def test_openai_tier_and_cache_fields_conform(kind: str, tier: str, stream: bool) -> None:
    model = CLASSES[kind](
        "gpt-5-mini",
        api_key=KEY,
        service_tier=tier,
        prompt_cache_key="job-42",
        prompt_cache_retention="24h",
    )
    body = model.request_body(ASK, None, stream=stream)  # type: ignore[attr-defined]
    assert body["service_tier"] == tier
    assert body["prompt_cache_key"] == "job-42"
    assert body["prompt_cache_retention"] == "24h"
    assert_conforms(body, PARAMS[(kind, stream)])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tier", ["auto", "standard_only"])
def test_anthropic_tier_conforms(tier: str, stream: bool) -> None:
    model = raygent.AnthropicModel("claude-haiku-4-5", api_key=KEY, service_tier=tier)  # type: ignore[arg-type]
    body = model.request_body(ASK, None, stream=stream)
    assert body["service_tier"] == tier
    assert_conforms(body, PARAMS[("anthropic", stream)])


@pytest.mark.parametrize("kind", ["openai", "openai_responses"])
def test_a_calls_options_win_over_the_models_settings(kind: str) -> None:
    model = CLASSES[kind]("gpt-5-mini", api_key=KEY, service_tier="flex", prompt_cache_key="a")
    call = ModelOptions(service_tier="priority", prompt_cache_retention="in_memory")
    body = model.request_body(ASK, call, stream=False)  # type: ignore[attr-defined]
    assert body["service_tier"] == "priority"  # the call's
    assert body["prompt_cache_key"] == "a"  # the model's: the call set none
    assert body["prompt_cache_retention"] == "in_memory"
    assert_conforms(body, PARAMS[(kind, False)])


@pytest.mark.parametrize("kind", ["openai", "openai_responses"])
def test_a_tier_with_a_fallback_sends_its_first_tier(kind: str) -> None:
    tier = raygent.Tier("flex", fallback="default")
    model = CLASSES[kind]("gpt-5-mini", api_key=KEY, service_tier=tier)
    body = model.request_body(ASK, None, stream=False)  # type: ignore[attr-defined]
    assert body["service_tier"] == "flex"
    assert_conforms(body, PARAMS[(kind, False)])


@pytest.mark.parametrize("derived", ["session", "agent"])
def test_a_derived_key_is_not_sent_by_a_model_outside_an_agent(derived: str) -> None:
    # Only an agent's run knows its session and its name: a bare request sends no key.
    model = raygent.OpenAIModel("gpt-5-mini", api_key=KEY, prompt_cache_key=derived)
    assert "prompt_cache_key" not in model.request_body(ASK, None, stream=False)


def test_nothing_is_sent_when_nothing_is_set() -> None:
    for kind, cls in CLASSES.items():
        body = cls("m", api_key=KEY).request_body(ASK, None, stream=False)  # type: ignore[attr-defined]
        assert not {"service_tier", "prompt_cache_key", "prompt_cache_retention"} & set(body), kind


# -- misspelt settings ---------------------------------------------------------------


# Bedrock's bodies conform to botocore's service model instead (below).
SIGNED: dict[str, type[HTTPModel]] = {"bedrock": raygent.BedrockModel}


def test_every_adapter_is_covered() -> None:
    assert set(_adapters()) == {*CLASSES.values(), *SIGNED.values()}


_BEDROCK = botocore.session.get_session().get_service_model("bedrock-runtime")
_CLAUDE = "us.anthropic.claude-haiku-4-5-20251001-v1:0"


def _bedrock_conforms(body: dict[str, Any], stream: bool) -> None:
    operation = "ConverseStream" if stream else "Converse"
    shape = _BEDROCK.operation_model(operation).input_shape
    report = ParamValidator().validate({"modelId": _CLAUDE, **body}, shape)
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tier", ["priority", "default", "flex", "reserved"])
def test_bedrock_tiers_conform_to_botocores_model(tier: str, stream: bool) -> None:
    model = raygent.BedrockModel(_CLAUDE, region="us-east-1", service_tier=tier)  # type: ignore[arg-type]
    body = model.request_body(ASK, None, stream=stream)
    assert body["serviceTier"] == {"type": tier}
    _bedrock_conforms(body, stream)


def test_bedrock_a_calls_tier_wins_and_a_fallback_sends_its_first() -> None:
    tier = raygent.Tier("flex", fallback="default")
    model = raygent.BedrockModel(_CLAUDE, region="us-east-1", service_tier=tier)
    assert model.request_body(ASK, None, stream=False)["serviceTier"] == {"type": "flex"}
    call = ModelOptions(service_tier="priority")
    assert model.request_body(ASK, call, stream=False)["serviceTier"] == {"type": "priority"}
    plain = raygent.BedrockModel(_CLAUDE, region="us-east-1")
    assert "serviceTier" not in plain.request_body(ASK, None, stream=False)
    # A provider batch's line goes at the batch price, with no tier.
    assert "serviceTier" not in model.batch_body(ASK, None)


@pytest.mark.parametrize("cls", _adapters(), ids=lambda c: c.__name__)
def test_an_unknown_setting_is_refused_naming_the_closest(cls: type[HTTPModel]) -> None:
    with pytest.raises(TypeError, match=r"'max_concurency'.*did you mean 'max_concurrency'"):
        cls("m", api_key=KEY, max_concurency=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=rf"{cls.__name__}.*'bogus_option'"):
        cls("m", api_key=KEY, bogus_option=1)  # type: ignore[call-arg]


def test_the_issues_example_is_refused() -> None:
    with pytest.raises(TypeError, match="bogus_option"):
        raygent.OpenAIModel("gpt-4o-mini", api_key="x", bogus_option=1)  # type: ignore[call-arg]


def test_a_setting_of_another_adapter_is_refused() -> None:
    # Anthropic has no prompt-cache key setting (it marks breakpoints: CacheControl).
    with pytest.raises(TypeError, match=r"AnthropicModel.*'prompt_cache_key'"):
        raygent.AnthropicModel("claude-haiku-4-5", api_key=KEY, prompt_cache_key="k")  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", _adapters(), ids=lambda c: c.__name__)
def test_every_setting_the_typeddict_declares_is_taken(
    cls: type[HTTPModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # Bedrock's region=None: the environment's
    # The known names are the settings TypedDict's: each one is accepted (None: unset).
    typed: Any = cls.settings_type
    names = set(typed.__optional_keys__) | set(typed.__required_keys__)
    assert {"api_key", "base_url", "pricing", "max_concurrency"} <= names
    cls("m", **{name: None for name in names if name != "api_key"}, api_key=KEY)


def test_the_adapters_own_keywords_are_suggested() -> None:
    with pytest.raises(TypeError, match="did you mean 'default_max_tokens'"):
        raygent.AnthropicModel("claude-haiku-4-5", api_key=KEY, default_max_token=9)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="did you mean 'store'"):
        raygent.OpenAIResponsesModel("gpt-5-mini", api_key=KEY, stor=True)  # type: ignore[call-arg]


def test_the_sdk_gate_refuses_a_tier_it_does_not_know() -> None:
    # The check above could fail: a tier the SDK does not declare does not conform.
    model = raygent.OpenAIModel("gpt-5-mini", api_key=KEY, service_tier="flexible")  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        assert_conforms(model.request_body(ASK, None, stream=False), PARAMS[("openai", False)])
