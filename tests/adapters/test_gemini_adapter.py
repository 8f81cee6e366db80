"""GeminiModel against the simulator over real HTTP, on the Gemini API and on Vertex AI:
replies whole and streamed, tools and parallel calls with their thought signatures sent
back (the simulator refuses a missing or altered one), structured output with repair,
continuation on MAX_TOKENS, blocked prompts and withheld replies as typed errors,
attachments, usage (cached and thoughts tokens) and prices, tiers, RESOURCE_EXHAUSTED
with RetryInfo, Vertex AI's token refresh, and the misspelt-setting refusal."""

from __future__ import annotations

import base64
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from google.auth.credentials import Credentials as BaseCredentials
from google.oauth2.credentials import Credentials
from pydantic import BaseModel
from test_gemini_wire import assert_sdk_body

import raygent
from raygent import GeminiModel, ImagePart, Repair, Tier, UserMessage, tool
from raygent.errors import (
    ContentBlockedError,
    InvalidOptionsError,
    RateLimitError,
    RecitationError,
    UnknownOptionError,
)
from raygent.messages import SystemMessage
from raygent.models import Done, ModelOptions, ReasoningDelta, ReasoningOptions, TextDelta
from raygent.models.contract import ResponseSchema, ToolSpec
from raygent.sim import Reply, Rule, ServiceTiers, SimRateLimits, ToolCallReply, serve

KEY = "gemini-sim-key"
FLASH = "gemini-2.5-flash"
G3 = "gemini-3-flash-preview"
HELLO = [UserMessage(content="hello")]


def model_on(sim: Any, endpoint: str, name: str = FLASH, **settings: Any) -> GeminiModel:
    """A Gemini model on the simulator: the Gemini API (a key), Vertex AI (a token) or
    Vertex AI in express mode (a key, no project)."""
    if endpoint == "express":
        return GeminiModel(name, vertex=True, api_key=KEY, base_url=sim.gemini_base_url, **settings)
    if endpoint == "vertex":
        return GeminiModel(
            name,
            vertex=True,
            project="sim-project",
            location=settings.pop("location", "global"),
            credentials=Credentials(token=KEY),
            base_url=sim.gemini_base_url,
            **settings,
        )
    return GeminiModel(name, api_key=KEY, base_url=sim.gemini_base_url, **settings)


@pytest.fixture(params=["api", "vertex", "express"])
def endpoint(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def both(model: GeminiModel, messages: Any = HELLO, options: Any = None) -> Any:
    whole = await model.complete(messages, options)
    chunks = [c async for c in model.stream(messages, options)]
    assert isinstance(chunks[-1], Done)
    return whole, chunks


# ------------------------------------------------------------------------ replies


async def test_text_whole_and_streamed_with_usage_prices_and_tier(endpoint: str) -> None:
    async with serve([Rule(reply=Reply(text="It is sunny in Paris today."))], api_key=KEY) as sim:
        model = model_on(sim, endpoint)
        whole, chunks = await both(model)
        path = sim.requests[-1].path
    streamed = chunks[-1].response
    assert whole.text == streamed.text == "It is sunny in Paris today."
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == whole.text
    assert whole.provider == "gemini" and whole.model == FLASH
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0
    # genai-prices' rates for gemini-2.5-flash: $0.30 in, $2.50 out a million tokens.
    cost = whole.usage.cost
    assert cost is not None
    assert cost.input == pytest.approx(whole.usage.input_tokens * 0.30e-6)
    assert cost.output == pytest.approx(whole.usage.output_tokens * 2.50e-6)
    assert whole.service_tier == streamed.service_tier == "standard"
    if endpoint == "vertex":
        assert path.startswith("/v1/projects/sim-project/locations/global/publishers/google/")
    elif endpoint == "express":
        assert path.startswith(f"/v1/publishers/google/models/{FLASH}:streamGenerateContent")
    else:
        assert path.startswith(f"/v1beta/models/{FLASH}:streamGenerateContent")


async def test_vertex_in_a_region_and_its_default_host() -> None:
    async with serve(api_key=KEY) as sim:
        model = model_on(sim, "vertex", location="europe-west4")
        assert (await model.complete(HELLO)).text
        assert "/locations/europe-west4/" in sim.requests[-1].path
    regional = GeminiModel(FLASH, vertex=True, project="p", location="europe-west4")
    assert regional.base_url == "https://europe-west4-aiplatform.googleapis.com"
    everywhere = GeminiModel(FLASH, vertex=True, project="p", location="global")
    assert everywhere.base_url == "https://aiplatform.googleapis.com"
    assert GeminiModel(FLASH, api_key="k").base_url == "https://generativelanguage.googleapis.com"


async def test_thinking_streams_thoughts_and_counts_thoughts_tokens(endpoint: str) -> None:
    reply = Reply(thinking="Let me think.", text="Hello there!")
    options = ModelOptions(reasoning=ReasoningOptions(effort="low"))
    async with serve([Rule(reply=reply)], api_key=KEY) as sim:
        whole, chunks = await both(model_on(sim, endpoint), options=options)
        config = sim.requests[-1].body["generationConfig"]
    assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 2048}
    assert "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)) == "Let me think."
    assert whole.text == "Hello there!"
    assert whole.usage.reasoning_tokens > 0
    assert whole.usage.output_tokens > whole.usage.reasoning_tokens


WEATHER = ToolSpec(
    name="get_weather",
    description="The weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


SIGNED_RUN = [
    Rule(
        match={"after_tool_result": False},
        reply=Reply(
            thinking="Two cities, so two calls.",
            tool_calls=[
                ToolCallReply("get_weather", {"city": "Paris"}),
                ToolCallReply("get_weather", {"city": "Rome"}),
            ],
        ),
    ),
    Rule(
        match={"after_tool_result": True},
        times=1,
        reply=Reply(
            thinking="Now Oslo.", tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"})]
        ),
    ),
    Rule(match={"after_tool_result": True}, reply=Reply(thinking="Done.", text="All sunny.")),
]


@pytest.mark.parametrize("stream", [False, True], ids=["execute", "stream"])
async def test_parallel_calls_go_back_with_their_signatures_through_an_agent(
    endpoint: str, stream: bool
) -> None:
    """Gemini 3: two parallel calls, then a sequential one, their thought signatures
    sent back verbatim each trip (the simulator refuses a missing or altered one, as
    Gemini 3 does): the run completes on either endpoint, executed or streamed."""
    async with serve(SIGNED_RUN, api_key=KEY) as sim:
        bot = raygent.agent(
            model=model_on(sim, endpoint, G3),
            tools=[get_weather],
            model_options={"reasoning": ReasoningOptions()},
        )
        if stream:
            run = bot.stream("weather in Paris and Rome, then Oslo?")
            async for _ in run:
                pass
            result = await run.result
        else:
            result = await bot.execute("weather in Paris and Rome, then Oslo?")
        sent = len(sim.requests)
        last = sim.requests[-1].body["contents"]
    # Answered at once each trip: a refused signature would have failed the run.
    assert result.ok, result.error
    assert result.text == "All sunny." and sent == 3
    signed = [p for c in last for p in c["parts"] if "functionCall" in p]
    assert [p["functionCall"]["args"]["city"] for p in signed] == ["Paris", "Rome", "Oslo"]
    assert "thoughtSignature" in signed[0] and "thoughtSignature" in signed[2]
    answers = [p["functionResponse"] for c in last for p in c["parts"] if "functionResponse" in p]
    assert [a["response"]["result"] for a in answers] == [
        "sunny in Paris",
        "sunny in Rome",
        "sunny in Oslo",
    ]


class City(BaseModel):
    name: str
    population: int


async def test_structured_output_with_repair(endpoint: str) -> None:
    replies = [Reply(text='{"name": "Oslo"}'), Reply(json={"name": "Oslo", "population": 700000})]
    async with serve([Rule(reply=replies)], api_key=KEY) as sim:
        bot = raygent.agent(model=model_on(sim, endpoint), output=City)
        result = await bot.execute("Oslo?", repair=Repair(max_attempts=1))
        config = sim.requests[0].body["generationConfig"]
    assert result.ok and result.data == City(name="Oslo", population=700000)
    assert [t.purpose for t in result.report.trips] == ["answer", "repair"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["name", "population"]


async def test_max_tokens_is_continued(endpoint: str) -> None:
    async with serve([Rule(reply=Reply(text="word " * 40))], api_key=KEY) as sim:
        bot = raygent.agent(
            model=model_on(sim, endpoint),
            model_options={"max_tokens": 10},
            continue_on_output_limit=2,
        )
        result = await bot.execute("an essay")
        sent = [r.body["generationConfig"]["maxOutputTokens"] for r in sim.requests]
    assert sent == [10, 10, 10]
    assert [t.finish_reason for t in result.report.trips] == ["length"] * 3
    assert [t.purpose for t in result.report.trips] == ["answer", "continuation", "continuation"]


@pytest.mark.parametrize(
    ("reply", "error", "facts"),
    [
        (Reply(block_reason="SAFETY"), ContentBlockedError, {"blocked": "prompt"}),
        (Reply(text="no", finish_reason="SAFETY"), ContentBlockedError, {"blocked": "reply"}),
        (Reply(text="no", finish_reason="PROHIBITED_CONTENT"), ContentBlockedError, {}),
        (Reply(text="a poem", finish_reason="RECITATION"), RecitationError, {}),
    ],
    ids=["blocked-prompt", "safety", "prohibited", "recitation"],
)
async def test_safety_and_recitation_are_typed_errors(
    endpoint: str, reply: Reply, error: type[Exception], facts: dict[str, Any]
) -> None:
    async with serve([Rule(reply=reply)], api_key=KEY) as sim:
        model = model_on(sim, endpoint)
        with pytest.raises(error) as whole:
            await model.complete(HELLO)
        with pytest.raises(error):
            _ = [c async for c in model.stream(HELLO)]
        result = await raygent.agent(model=model).execute("hello")
    assert all(whole.value.details.get(k) == v for k, v in facts.items())
    assert isinstance(result.error, error) and result.report.status == "failed"


async def test_images_go_inline_or_by_uri(endpoint: str) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n0000").decode()
    message = UserMessage(
        content=[
            {"type": "text", "text": "look"},
            ImagePart(data=png, media_type="image/png"),
            ImagePart(url="gs://bucket/cat.jpg"),
        ]
    )
    async with serve(api_key=KEY) as sim:
        await model_on(sim, endpoint).complete([message])
        parts = sim.requests[-1].body["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "image/png", "data": png}}
    assert parts[2] == {"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://bucket/cat.jpg"}}


# ------------------------------------------------------------------ caches and prices


async def test_implicit_cache_hits_are_read_and_priced_as_cached(endpoint: str) -> None:
    long = "A long shared document. " * 300
    async with serve(api_key=KEY) as sim:
        model = model_on(sim, endpoint)
        for question in ("question one", "question two"):
            parts = [{"type": "text", "text": long}, {"type": "text", "text": question}]
            second = await model.complete([UserMessage(content=parts)])
    usage = second.usage
    assert 1024 <= usage.cached_tokens < usage.input_tokens
    assert usage.cost is not None
    # Cached tokens at $0.03 a million, the rest at $0.30.
    assert usage.cost.cached_input == pytest.approx(usage.cached_tokens * 0.03e-6)
    assert usage.cost.input == pytest.approx((usage.input_tokens - usage.cached_tokens) * 0.30e-6)


async def test_an_explicit_cache_is_read_and_priced_as_cached() -> None:
    document = "The policy says: " + "every rule applies. " * 400
    async with serve(api_key=KEY) as sim:
        async with httpx.AsyncClient() as http:
            created = await http.post(
                f"{sim.url}/v1beta/cachedContents",
                headers={"x-goog-api-key": KEY},
                json={
                    "model": f"models/{FLASH}",
                    "contents": [{"role": "user", "parts": [{"text": document}]}],
                    "systemInstruction": {"parts": [{"text": "Answer from the policy."}]},
                },
            )
        assert created.status_code == 200, created.text
        name = created.json()["name"]
        model = model_on(sim, "api", cached_content=name)
        reply = await model.complete([SystemMessage(content="ignored"), *HELLO])
        body = sim.requests[-1].body
    assert body["cachedContent"] == name and "systemInstruction" not in body
    assert reply.usage.cached_tokens > 1000 and reply.usage.cost is not None
    assert reply.usage.cost.cached_input == pytest.approx(reply.usage.cached_tokens * 0.03e-6)


# ------------------------------------------------------------------------- tiers


async def test_tiers_are_sent_and_priced_at_what_served_them(endpoint: str) -> None:
    async with serve(api_key=KEY, tiers=ServiceTiers(priority_downgrade_rate=1.0)) as sim:
        flex = await model_on(sim, endpoint, service_tier="flex").complete(HELLO)
        sent = sim.requests[-1]
        downgraded, chunks = await both(
            model_on(sim, endpoint), options=ModelOptions(service_tier="priority")
        )
    assert sent.body["serviceTier"] == "flex" and flex.service_tier == "flex"
    assert flex.usage.cost is not None
    assert flex.usage.cost.input == pytest.approx(flex.usage.input_tokens * 0.15e-6)
    # Priority past its limit: served (and priced) at standard, without an error.
    for served in (downgraded, chunks[-1].response):
        assert served.service_tier == "standard"
        assert served.usage.cost.input == pytest.approx(served.usage.input_tokens * 0.30e-6)


async def test_priority_is_priced_above_standard(endpoint: str) -> None:
    async with serve(api_key=KEY) as sim:
        reply = await model_on(sim, endpoint, service_tier="priority").complete(HELLO)
    assert reply.service_tier == "priority" and reply.usage.cost is not None
    assert reply.usage.cost.input == pytest.approx(reply.usage.input_tokens * 0.60e-6)


async def test_flex_shed_for_capacity_goes_again_at_the_fallback_tier(endpoint: str) -> None:
    """A flex request Gemini sheds (503 UNAVAILABLE) is a refusal for capacity: sent
    again at the fallback tier by the access layer, the refusal billed at nothing."""
    async with serve(api_key=KEY, tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        model = model_on(sim, endpoint, service_tier=Tier("flex", fallback="standard"))
        with pytest.raises(RateLimitError) as shed:
            await model_on(sim, endpoint, service_tier="flex").complete(HELLO)
        result = await raygent.agent(model=model).execute("hello")
        asked = [r.body.get("serviceTier") for r in sim.requests]
    assert shed.value.for_capacity and shed.value.status == 503
    assert result.ok and result.report.trips[0].service_tier == "standard"
    assert asked == ["flex", "flex", "standard"]


async def test_a_tier_gemini_does_not_have_is_refused_before_sending() -> None:
    with pytest.raises(InvalidOptionsError, match="not a Gemini tier"):
        GeminiModel(FLASH, api_key="k").request_body(
            HELLO, ModelOptions(service_tier="default"), stream=False
        )


# ------------------------------------------------------------------- rate limits


async def test_resource_exhausted_carries_retry_info_and_is_waited_out(endpoint: str) -> None:
    limits = SimRateLimits(requests_per_minute=60)
    async with serve(api_key=KEY, rate_limits=limits) as sim:
        model = model_on(sim, endpoint)
        await model.complete(HELLO)
        with pytest.raises(RateLimitError) as limited:
            await model.complete(HELLO)
        result = await raygent.agent(model=model).execute("hello")
        limited_count = sim.stats().rate_limited["requests"]
    error = limited.value
    assert error.retryable and error.provider_code == "RESOURCE_EXHAUSTED"
    if endpoint == "api":  # the Gemini API says when (RetryInfo); Vertex AI does not
        assert error.retry_after == 1.0 and error.details["rate"]["retry_after"] == 1.0
        assert error.details["quota_value"] == "60"
    # The run waits the 429 out (as Google asks) and is answered.
    assert result.ok and limited_count >= 1


# -------------------------------------------------------------- keys and credentials


class Expiring(BaseCredentials):  # type: ignore[misc]
    """Credentials that expire at once until refreshed, counting their refreshes."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshes = 0

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = KEY
        self.expiry = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None)


async def test_vertex_refreshes_its_token_off_the_loop_once() -> None:
    credentials = Expiring()
    async with serve(api_key=KEY) as sim:
        model = GeminiModel(
            FLASH, vertex=True, project="p", credentials=credentials, base_url=sim.url
        )
        for _ in range(3):
            assert (await model.complete(HELLO)).text
        sent = sim.requests[-1].headers
    assert credentials.refreshes == 1
    assert sent["authorization"] == "[redacted]"  # a Bearer token was sent


async def test_a_wrong_token_is_an_authentication_error() -> None:
    async with serve(api_key=KEY) as sim:
        model = GeminiModel(
            FLASH,
            vertex=True,
            project="p",
            credentials=Credentials(token="wrong"),
            base_url=sim.url,
        )
        with pytest.raises(raygent.errors.AuthenticationError) as refused:
            await model.complete(HELLO)
    assert refused.value.status == 401 and "wrong" not in str(refused.value)


def test_vertex_needs_a_project(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: no metadata server here
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login either
    with pytest.raises(InvalidOptionsError, match="GOOGLE_CLOUD_PROJECT"):
        GeminiModel(FLASH, vertex=True)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    model = GeminiModel(FLASH, vertex=True, location="us-central1")
    assert model.project == "from-env" and "/projects/from-env/locations/us-central1/" in (
        model.request_path(stream=False)
    )


def test_the_key_comes_from_gemini_api_key_then_google_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    assert GeminiModel(FLASH)._auth_headers() == {"x-goog-api-key": "from-google"}
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert GeminiModel(FLASH)._auth_headers() == {"x-goog-api-key": "from-gemini"}


def test_models_pickle_for_ray_and_vertex_limits_are_held_per_project() -> None:
    api = GeminiModel(FLASH, api_key="k")
    vertex = GeminiModel(FLASH, vertex=True, project="p", credentials=Credentials(token="t"))
    for model in (api, vertex):
        copy = pickle.loads(pickle.dumps(model))
        assert copy.endpoint == model.endpoint and copy.request_path(stream=True) == (
            model.request_path(stream=True)
        )
    other = GeminiModel(FLASH, vertex=True, project="q", credentials=Credentials(token="t"))
    assert vertex.key_fingerprint != other.key_fingerprint


async def test_express_mode_is_vertex_ai_by_api_key() -> None:
    """Vertex AI's express mode: the key in `x-goog-api-key`, no token, no project in
    the path, the global host (google-genai's express client is answered by the same
    route: tests/sim/test_sim_gemini.py)."""
    async with serve([Rule(reply=Reply(text="express"))], api_key=KEY) as sim:
        mine = await model_on(sim, "express").complete(HELLO)
        sent = sim.requests[-1]
    assert mine.text == "express"
    assert sent.path == f"/v1/publishers/google/models/{FLASH}:generateContent"
    assert sent.headers["x-goog-api-key"] == "[redacted]" and "authorization" not in sent.headers
    assert GeminiModel(FLASH, vertex=True, api_key="k").base_url == (
        "https://aiplatform.googleapis.com"
    )


async def test_express_mode_with_a_wrong_key_is_an_authentication_error() -> None:
    async with serve(api_key=KEY) as sim:
        model = GeminiModel(FLASH, vertex=True, api_key="wrong-key", base_url=sim.url)
        with pytest.raises(raygent.errors.AuthenticationError) as refused:
            await model.complete(HELLO)
    assert refused.value.status == 401 and "wrong-key" not in str(refused.value)


@pytest.mark.parametrize(
    "also",
    [{"project": "p"}, {"location": "us-central1"}, {"credentials": Credentials(token="t")}],
    ids=["project", "location", "credentials"],
)
def test_express_mode_and_a_project_exclude_each_other(also: dict[str, Any]) -> None:
    # As google-genai refuses them together: which identity pays would be a guess.
    name = next(iter(also))
    with pytest.raises(InvalidOptionsError, match=f"express mode.*{name}="):
        GeminiModel(FLASH, vertex=True, api_key="k", **also)


def test_express_mode_limits_are_held_per_key_and_it_has_no_batch_prediction() -> None:
    one = GeminiModel(FLASH, vertex=True, api_key="k1", batch_bucket="gs://b/p")
    two = GeminiModel(FLASH, vertex=True, api_key="k2")
    copy = pickle.loads(pickle.dumps(one))
    assert copy.express and copy.request_path(stream=False) == one.request_path(stream=False)
    assert one.key_fingerprint != two.key_fingerprint  # its quota is the key's
    assert one.batch_api() is None  # batch prediction needs a project and its bucket
    bot = raygent.agent(model=one)
    with pytest.raises(InvalidOptionsError, match="not in express mode"):
        raygent.batch_sync(bot, ["q"], provider_batch=True, progress=False)


@pytest.mark.parametrize(
    ("setting", "closest"),
    [("api_ky", "api_key"), ("servce_tier", "service_tier"), ("projcet", "project")],
)
def test_a_misspelt_setting_is_refused_naming_the_closest(setting: str, closest: str) -> None:
    with pytest.raises(UnknownOptionError, match=closest):
        GeminiModel(FLASH, **{setting: "x"})  # type: ignore[arg-type]


def test_a_model_option_given_as_a_setting_says_where_it_belongs() -> None:
    with pytest.raises(UnknownOptionError, match="per request"):
        GeminiModel(FLASH, api_key="k", max_tokens=10)  # type: ignore[call-arg]


# ------------------------------------------------------- bodies by the SDK's types


@pytest.mark.parametrize("name", [FLASH, G3, "gemini-1.5-flash"])
@pytest.mark.parametrize("endpoint_name", ["api", "vertex"])
def test_every_body_validates_against_the_sdk_types(name: str, endpoint_name: str) -> None:
    model = (
        GeminiModel(name, vertex=True, project="p", credentials=Credentials(token="t"))
        if endpoint_name == "vertex"
        else GeminiModel(name, api_key="k")
    )
    options = ModelOptions(
        tools=(WEATHER,),
        tool_choice="required",
        response_schema=ResponseSchema(json_schema=City.model_json_schema()),
        reasoning=ReasoningOptions(effort="high"),
        max_tokens=100,
        temperature=0.2,
        service_tier="flex",
    )
    messages = [
        SystemMessage(content="Be brief."),
        UserMessage(content="weather in Paris?"),
    ]
    for stream in (False, True):
        assert_sdk_body(model.request_body(messages, options, stream=stream))
    assert_sdk_body(model.batch_body(messages, options))


async def test_a_jobs_estimate_is_priced_from_genai_prices(endpoint: str) -> None:
    async with serve([Rule(reply=Reply(text="fine"))], api_key=KEY) as sim:
        bot = raygent.agent(model=model_on(sim, endpoint))
        guess = await raygent.estimate(bot, [f"q{i}" for i in range(20)], sample=4, seed=1)
    assert guess.sample == 4 and guess.items == 20 and guess.requests == 20
    assert guess.cost_usd is not None and guess.cost_usd > 0
