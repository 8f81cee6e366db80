"""A model named `PROVIDER:NAME` (`raygent.models.model_from_name`, `raygent.agent(model=
"...")`, `Agent.with_model`), and the base URL each adapter reads from the variable its
provider's SDK reads."""

from __future__ import annotations

import pytest
from google.oauth2.credentials import Credentials

import raygent
from raygent import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
)
from raygent.errors import InvalidOptionsError, UnknownOptionError
from raygent.models import model_from_name
from raygent.sim import Reply, Rule, serve

SDK_VARIABLES = (
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_VERTEX_BASE_URL",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
)


@pytest.fixture(autouse=True)
def _no_sdk_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SDK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("spec", "kind", "name"),
    [
        ("openai:gpt-4o-mini", OpenAIModel, "gpt-4o-mini"),
        ("openai-responses:gpt-5", OpenAIResponsesModel, "gpt-5"),
        ("anthropic:claude-haiku-4-5", AnthropicModel, "claude-haiku-4-5"),
        ("gemini:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
        # Other libraries' words for the same providers (pydantic-ai's, LiteLLM's).
        ("google-gla:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
        ("responses:gpt-5", OpenAIResponsesModel, "gpt-5"),
        # Only the first ':' splits: a Bedrock id or profile holds one of its own.
        ("bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0", BedrockModel, None),
        (" OpenAI :gpt-4o", OpenAIModel, "gpt-4o"),
    ],
)
def test_each_provider_word_builds_its_adapter(spec: str, kind: type, name: str | None) -> None:
    model = model_from_name(spec, region="us-east-1") if kind is BedrockModel else None
    model = model or model_from_name(spec)
    assert type(model) is kind
    assert model.name == (name or spec.split(":", 1)[1])


@pytest.mark.parametrize("word", ["vertex", "google-vertex", "vertex_ai"])
def test_vertex_words_build_a_vertex_model(word: str) -> None:
    model = model_from_name(
        f"{word}:gemini-2.5-pro", project="p", location="europe-west4", credentials=Credentials("t")
    )
    assert isinstance(model, GeminiModel) and model.vertex
    assert model.base_url == "https://europe-west4-aiplatform.googleapis.com"


def test_settings_reach_the_adapter_and_a_misspelt_one_is_refused() -> None:
    model = model_from_name("openai:gpt-4o-mini", api_key="k", max_concurrency=7)
    assert model.max_concurrency == 7
    with pytest.raises(UnknownOptionError, match="max_concurency"):
        model_from_name("openai:gpt-4o-mini", api_key="k", max_concurency=7)


@pytest.mark.parametrize(
    ("spec", "error", "said"),
    [
        ("opnai:gpt-4o", UnknownOptionError, "unknown provider 'opnai' (did you mean 'openai'?)"),
        ("mistral:large", UnknownOptionError, "known: anthropic, bedrock, gemini, openai"),
        ("gpt-4o", InvalidOptionsError, "a model is named PROVIDER:NAME"),
        ("openai:", InvalidOptionsError, "a model is named PROVIDER:NAME"),
        (":gpt-4o", InvalidOptionsError, "a model is named PROVIDER:NAME"),
    ],
)
def test_a_name_no_adapter_takes_is_refused_typed(spec: str, error: type, said: str) -> None:
    with pytest.raises(error) as caught:
        model_from_name(spec)
    assert said in str(caught.value)
    with pytest.raises(error):
        raygent.agent(model=spec)


@pytest.mark.parametrize(
    ("kind", "variable", "url"),
    [
        (OpenAIModel, "OPENAI_BASE_URL", "http://127.0.0.1:8100/v1"),
        (OpenAIResponsesModel, "OPENAI_BASE_URL", "http://127.0.0.1:8100/v1"),
        (AnthropicModel, "ANTHROPIC_BASE_URL", "http://127.0.0.1:8100"),
        (GeminiModel, "GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:8100"),
    ],
)
def test_the_base_url_comes_from_the_sdk_s_variable_unless_given(
    kind: type, variable: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = kind("m", api_key="k").base_url
    monkeypatch.setenv(variable, url + "/")
    from_env = kind("m")
    assert from_env.base_url == url
    # A base URL of one's own needs no key, given or from the environment.
    assert not from_env._key_required
    assert kind("m", base_url="http://127.0.0.1:8200", api_key="k").base_url == (
        "http://127.0.0.1:8200"
    )
    monkeypatch.setenv(variable, "")
    assert kind("m", api_key="k").base_url == default


def test_vertex_reads_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:8100")
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", "http://127.0.0.1:8300")
    vertex = GeminiModel("gemini-2.5-flash", vertex=True, project="p", credentials=Credentials("t"))
    assert vertex.base_url == "http://127.0.0.1:8300"
    assert GeminiModel("gemini-2.5-flash").base_url == "http://127.0.0.1:8100"


async def test_an_agent_named_by_its_model_runs_on_it_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serve([Rule(reply=Reply(text="from gemini"))]) as sim:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", sim.gemini_base_url)
        monkeypatch.setenv("GEMINI_API_KEY", "gm-key")
        bot = raygent.agent(model="gemini:gemini-2.5-flash")
        result = await bot.execute("hi")
        paths = [r.path for r in sim.requests]
    assert result.ok, result.error
    assert result.text == "from gemini"
    assert paths == ["/v1beta/models/gemini-2.5-flash:generateContent"]
    assert bot.name == "anon_gemini_gemini-2.5-flash"


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return q


def test_with_model_keeps_the_agent_and_swaps_only_its_model() -> None:
    named = raygent.agent(
        "support",
        model=OpenAIModel("gpt-4o-mini", api_key="k"),
        tools=[lookup],
        system_prompt="be brief",
        model_options={"max_tokens": 64},
    )
    moved = named.with_model("anthropic:claude-haiku-4-5")
    assert isinstance(moved.model, AnthropicModel) and isinstance(named.model, OpenAIModel)
    assert moved.name == "support"  # its sessions and durable runs stay its own
    assert (moved.tools, moved.system_prompt, moved.model_options) == (
        named.tools,
        named.system_prompt,
        named.model_options,
    )
    assert moved.backend == named.backend
    anonymous = raygent.agent(model=OpenAIModel("gpt-4o-mini", api_key="k"), tools=[lookup])
    renamed = anonymous.with_model(GeminiModel("gemini-2.5-flash", api_key="g"))
    assert renamed.name == "anon_gemini_gemini-2.5-flash_lookup"
    assert anonymous.name == "anon_openai_gpt-4o-mini_lookup"
    # Handlers subscribed to one are not the other's.
    moved.on("run_start", lambda event: None)
    assert moved._instance_handlers and not named._instance_handlers
