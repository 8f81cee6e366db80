"""The simulator speaks Gemini: the official google-genai SDK (Gemini API and Vertex AI
clients) runs against it, and every reply shape parses strictly into the SDK's types."""

from __future__ import annotations

import base64

import pytest
from gemini_sdk import KEY, express, gemini, post, sse_events, strict, text_body, vertex
from google.genai import errors, types

from raygent.sim import Reply, ServerToolReply, ServiceTiers, SimRateLimits, ToolCallReply, serve

FLASH = "gemini-2.5-flash"
G3 = "gemini-3-flash-preview"
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
)
TWO_CALLS = Reply(
    thinking="The user wants two cities.",
    tool_calls=[
        ToolCallReply("get_weather", {"city": "Paris"}),
        ToolCallReply("get_weather", {"city": "Rome"}),
    ],
)


def test_generate_text_through_the_sdk() -> None:
    with serve({"default": "Bonjour."}, api_key=KEY) as sim:
        reply = gemini(sim).models.generate_content(model=FLASH, contents="hello")
        assert reply.text == "Bonjour."
        assert reply.candidates[0].finish_reason == types.FinishReason.STOP
        usage = reply.usage_metadata
        assert usage.prompt_token_count == sim.stats().admitted_input_tokens
        assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
        assert reply.sdk_http_response.headers["x-gemini-service-tier"] == "standard"
        record = sim.requests[-1]
        assert record.api == "gemini"
        assert record.path == f"/v1beta/models/{FLASH}:generateContent"
        assert record.headers["x-goog-api-key"] == "[redacted]"
        assert not [h for h in reply.sdk_http_response.headers if "ratelimit" in h]


def test_the_sdk_default_version_v1_is_served_too() -> None:
    with serve({"default": "ok"}) as sim:
        reply = gemini(sim, api_version="v1").models.generate_content(model=FLASH, contents="x")
        assert reply.text == "ok"
        assert sim.requests[-1].path == f"/v1/models/{FLASH}:generateContent"


def test_stream_through_the_sdk_is_sse_whole_responses() -> None:
    text = "A rather long answer that certainly takes several chunks to stream out."
    with serve({"default": text}) as sim:
        chunks = list(gemini(sim).models.generate_content_stream(model=FLASH, contents="go"))
        assert len(chunks) > 2
        assert "".join(c.text or "" for c in chunks) == text
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
        assert chunks[-1].usage_metadata.candidates_token_count == len(text) // 4 + 1
        assert sim.requests[-1].path.endswith(":streamGenerateContent")
        assert sim.stats().streams == 1
        raw = post(sim, f"/v1beta/models/{FLASH}:streamGenerateContent?alt=sse", text_body("go"))
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.text.endswith("\r\n\r\n")
        for event in sse_events(raw):
            strict(event)


def test_stream_without_alt_sse_is_refused() -> None:
    with serve() as sim:
        raw = post(sim, f"/v1beta/models/{FLASH}:streamGenerateContent", text_body("go"))
        assert raw.status_code == 404
        assert raw.json()["error"]["status"] == "NOT_FOUND"


def test_count_tokens_on_both_endpoints() -> None:
    with serve() as sim:
        counted = gemini(sim).models.count_tokens(model=FLASH, contents="hello there")
        reply = gemini(sim).models.generate_content(model=FLASH, contents="hello there")
        assert counted.total_tokens == reply.usage_metadata.prompt_token_count
        assert vertex(sim).models.count_tokens(
            model=FLASH, contents="hello there"
        ).total_tokens == (counted.total_tokens)
        raw = post(sim, f"/v1beta/models/{FLASH}:countTokens", text_body("hello there")).json()
        assert raw["promptTokensDetails"] == [
            {"modality": "TEXT", "tokenCount": raw["totalTokens"]}
        ]
        wrapped = {
            "generateContentRequest": {"model": f"models/{FLASH}", **text_body("hello there")}
        }
        assert post(sim, f"/v1beta/models/{FLASH}:countTokens", wrapped).json() == raw


@pytest.mark.parametrize("location", ["global", "us-central1"])
def test_vertex_generate_stream_and_count_with_a_bearer_token(location: str) -> None:
    with serve({"default": "From Vertex."}, api_key=KEY) as sim:
        client = vertex(sim, location=location)
        reply = client.models.generate_content(model=FLASH, contents="hi")
        assert reply.text == "From Vertex."
        assert reply.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND
        assert reply.create_time is not None
        streamed = "".join(
            c.text or "" for c in client.models.generate_content_stream(model=FLASH, contents="hi")
        )
        assert streamed == "From Vertex."
        prefix = (
            f"/v1beta1/projects/sim-project/locations/{location}/publishers/google/models/{FLASH}"
        )
        paths = [r.path for r in sim.requests]
        assert paths == [prefix + ":generateContent", prefix + ":streamGenerateContent"]
        assert sim.requests[0].headers["authorization"] == "[redacted]"
        with pytest.raises(errors.ClientError) as refused:
            vertex(sim, token="wrong").models.generate_content(model=FLASH, contents="hi")
        assert refused.value.code == 401
        assert refused.value.status == "UNAUTHENTICATED"


def test_vertex_express_mode_by_api_key_with_no_project_in_the_path() -> None:
    with serve({"default": "From express."}, api_key=KEY) as sim:
        client = express(sim)
        assert client.models.generate_content(model=FLASH, contents="hi").text == "From express."
        streamed = client.models.generate_content_stream(model=FLASH, contents="hi")
        assert "".join(c.text or "" for c in streamed) == "From express."
        prefix = f"/v1beta1/publishers/google/models/{FLASH}"
        assert [r.path for r in sim.requests] == [
            prefix + ":generateContent",
            prefix + ":streamGenerateContent",
        ]
        assert "authorization" not in sim.requests[0].headers
        with pytest.raises(errors.ClientError) as refused:
            express(sim, key="wrong").models.generate_content(model=FLASH, contents="hi")
        assert refused.value.code == 401


def test_api_key_by_header_or_query_and_a_wrong_key_refused() -> None:
    with serve({"default": "ok"}, api_key=KEY) as sim:
        path = f"/v1beta/models/{FLASH}:generateContent"
        assert post(sim, path, text_body("x")).status_code == 200
        assert post(sim, path + f"?key={KEY}", text_body("x"), key=None).status_code == 200
        wrong = post(sim, path, text_body("x"), key="nope")
        assert wrong.status_code == 401
        error = wrong.json()["error"]
        assert error["message"] == "API key not valid. Please pass a valid API key."
        assert error["details"][0]["reason"] == "API_KEY_INVALID"
        with pytest.raises(errors.ClientError):
            gemini(sim, key="nope").models.generate_content(model=FLASH, contents="x")


def _tools_config(thoughts: bool = True) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        tools=[WEATHER], thinking_config=types.ThinkingConfig(include_thoughts=thoughts)
    )


def test_parallel_function_calls_with_ids_thoughts_and_one_signature() -> None:
    with serve({"default": TWO_CALLS.model_dump(by_alias=True)}) as sim:
        reply = gemini(sim).models.generate_content(
            model=G3, contents="weather?", config=_tools_config()
        )
        parts = reply.candidates[0].content.parts
        assert parts[0].thought is True and parts[0].text == "The user wants two cities."
        calls = [p for p in parts if p.function_call]
        assert [(c.function_call.id, c.function_call.args) for c in calls] == [
            ("fc_1", {"city": "Paris"}),
            ("fc_2", {"city": "Rome"}),
        ]
        # Gemini 3 signs the first call of a step only.
        assert calls[0].thought_signature and calls[1].thought_signature is None
        usage = reply.usage_metadata
        assert usage.thoughts_token_count == len("The user wants two cities.") // 4 + 1
        assert usage.total_token_count == (
            usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
        )


def test_thought_summaries_only_when_asked_for() -> None:
    with serve(
        {"default": Reply(thinking="hidden", text="shown").model_dump(by_alias=True)}
    ) as sim:
        reply = gemini(sim).models.generate_content(model=FLASH, contents="x")
        assert [p.text for p in reply.candidates[0].content.parts] == ["shown"]
        assert reply.usage_metadata.thoughts_token_count == 2


def _conversation(sim_reply: types.GenerateContentResponse) -> list[types.Content]:
    model_turn = sim_reply.candidates[0].content
    answers = [
        types.Part.from_function_response(name="get_weather", response={"result": "sunny"})
        for p in model_turn.parts
        if p.function_call
    ]
    return [
        types.Content(role="user", parts=[types.Part(text="weather?")]),
        model_turn,
        types.Content(role="user", parts=answers),
    ]


def test_signatures_sent_back_verbatim_are_accepted() -> None:
    with serve(
        [{"match": {"after_tool_result": False}, "reply": TWO_CALLS.model_dump(by_alias=True)}]
    ) as sim:
        client = gemini(sim)
        first = client.models.generate_content(
            model=G3, contents="weather?", config=_tools_config()
        )
        second = client.models.generate_content(
            model=G3, contents=_conversation(first), config=_tools_config()
        )
        assert second.text.startswith("Simulated reply")


def test_a_missing_signature_is_refused_as_gemini_3_refuses_it() -> None:
    with serve({"default": TWO_CALLS.model_dump(by_alias=True)}) as sim:
        client = gemini(sim)
        first = client.models.generate_content(
            model=G3, contents="weather?", config=_tools_config()
        )
        history = _conversation(first)
        for part in history[1].parts:
            part.thought_signature = None
        with pytest.raises(errors.ClientError) as refused:
            client.models.generate_content(model=G3, contents=history, config=_tools_config())
        assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"
        assert refused.value.message == (
            "Function call is missing a thought_signature in functionCall parts. This is "
            "required for tools to work correctly, and missing thought_signature may lead to "
            "degraded model performance. Additional data, function call `default_api:get_weather` "
            ", position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures"
            " for more details."
        )
        with pytest.raises(errors.ClientError) as on_vertex:
            vertex(sim).models.generate_content(model=G3, contents=history, config=_tools_config())
        assert (
            "function call `get_weather` in the 2. content block is missing a `thought_signature`"
            in (on_vertex.value.message)
        )
        # Gemini 2.5 does not enforce; the documented dummy signature skips the check.
        client.models.generate_content(model=FLASH, contents=history, config=_tools_config())
        raw = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in history]
        raw[1]["parts"][1]["thoughtSignature"] = "skip_thought_signature_validator"
        ok = post(sim, f"/v1beta/models/{G3}:generateContent", {"contents": raw})
        assert ok.status_code == 200, ok.text


def test_an_altered_signature_or_arguments_are_corrupted() -> None:
    with serve({"default": TWO_CALLS.model_dump(by_alias=True)}) as sim:
        client = gemini(sim)
        first = client.models.generate_content(
            model=G3, contents="weather?", config=_tools_config()
        )
        for alter in ("signature", "arguments"):
            history = _conversation(first)
            call = history[1].parts[1]
            if alter == "signature":
                raw = bytearray(call.thought_signature)
                raw[3] ^= 1
                call.thought_signature = bytes(raw)
            else:
                call.function_call.args = {"city": "Berlin"}
            with pytest.raises(errors.ClientError) as refused:
                client.models.generate_content(model=G3, contents=history, config=_tools_config())
            assert refused.value.message == "Corrupted thought signature."
        history = _conversation(first)
        history[1].parts[1].thought_signature = b"not a signature"
        with pytest.raises(errors.ClientError):  # corrupted on every model, not only Gemini 3
            client.models.generate_content(model=FLASH, contents=history, config=_tools_config())


def test_text_replies_carry_the_signature_on_the_last_part() -> None:
    with serve({"default": "Plain text."}) as sim:
        raw = post(sim, f"/v1beta/models/{G3}:generateContent", text_body("x")).json()
        strict(raw)
        parts = raw["candidates"][0]["content"]["parts"]
        assert parts[-1]["text"] == "Plain text." and base64.b64decode(
            parts[-1]["thoughtSignature"]
        )
        events = sse_events(
            post(sim, f"/v1beta/models/{G3}:streamGenerateContent?alt=sse", text_body("x"))
        )
        last = events[-1]["candidates"][0]["content"]["parts"]
        assert last == [{"text": "", "thoughtSignature": parts[-1]["thoughtSignature"]}]


def test_a_call_without_an_id_when_scripted_so() -> None:
    calls = Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"}, id="")])
    with serve({"default": calls.model_dump(by_alias=True)}) as sim:
        raw = post(sim, f"/v1beta/models/{FLASH}:generateContent", text_body("x")).json()
        assert raw["candidates"][0]["content"]["parts"] == [
            {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
        ]


def test_function_responses_must_answer_every_call() -> None:
    with serve() as sim:
        contents = [
            {"role": "user", "parts": [{"text": "x"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "a", "args": {}}},
                    {"functionCall": {"name": "b", "args": {}}},
                ],
            },
            {"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {}}}]},
        ]
        refused = post(sim, f"/v1beta/models/{FLASH}:generateContent", {"contents": contents})
        assert refused.status_code == 400
        assert "number of function response parts is equal" in refused.json()["error"]["message"]
        bad_role = post(
            sim,
            f"/v1beta/models/{FLASH}:generateContent",
            {"contents": [{"role": "bot", "parts": [{"text": "x"}]}]},
        )
        assert bad_role.json()["error"]["message"] == "Please use a valid role: user, model."
        assert (
            bad_role.json()["error"]["details"][0]["@type"]
            == "type.googleapis.com/google.rpc.BadRequest"
        )


@pytest.mark.parametrize("schema_key", ["responseJsonSchema", "responseSchema"])
def test_structured_output_follows_either_schema(schema_key: str) -> None:
    json_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    openapi = {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}, "required": ["n"]}
    schema = json_schema if schema_key == "responseJsonSchema" else openapi
    with serve() as sim:
        config = {"responseMimeType": "application/json", schema_key: schema}
        raw = post(
            sim, f"/v1beta/models/{FLASH}:generateContent", text_body("x", generationConfig=config)
        )
        assert raw.status_code == 200
        assert strict(raw.json()).parsed is None  # the SDK parses only when it sent the schema
        import json

        assert json.loads(raw.json()["candidates"][0]["content"]["parts"][0]["text"]) == {"n": 0}
        no_mime = post(
            sim,
            f"/v1beta/models/{FLASH}:generateContent",
            text_body("x", generationConfig={schema_key: schema}),
        )
        assert no_mime.status_code == 400


def test_blocked_prompt_has_prompt_feedback_and_no_candidates() -> None:
    with serve({"default": {"block_reason": "SAFETY"}}) as sim:
        reply = gemini(sim).models.generate_content(model=FLASH, contents="x")
        assert reply.candidates is None
        assert reply.prompt_feedback.block_reason == types.BlockedReason.SAFETY
        assert any(r.blocked for r in reply.prompt_feedback.safety_ratings)
        raw = post(sim, f"/v1beta/models/{FLASH}:generateContent", text_body("x")).json()
        strict(raw)
        assert "candidatesTokenCount" not in raw["usageMetadata"]
        events = sse_events(
            post(sim, f"/v1beta/models/{FLASH}:streamGenerateContent?alt=sse", text_body("x"))
        )
        assert len(events) == 1 and events[0]["promptFeedback"]["blockReason"] == "SAFETY"


@pytest.mark.parametrize(
    ("reply", "finish", "has_content"),
    [
        ({"text": "withheld", "finish": "content_filter"}, "SAFETY", False),
        ({"text": "quoted", "finish_reason": "RECITATION"}, "RECITATION", True),
        ({"text": "x", "finish_reason": "BLOCKLIST"}, "BLOCKLIST", False),
        ({"text": "x", "finish_reason": "PROHIBITED_CONTENT"}, "PROHIBITED_CONTENT", False),
        ({"text": "x", "finish_reason": "SPII"}, "SPII", False),
        ({"text": "x", "finish_reason": "OTHER"}, "OTHER", True),
        ({"text": "x", "finish_reason": "LANGUAGE"}, "LANGUAGE", True),
        (
            {"tool_calls": [{"name": "f", "arguments": "{not json"}]},
            "MALFORMED_FUNCTION_CALL",
            False,
        ),
        ({"text": "a long answer cut short by the limit"}, "MAX_TOKENS", True),
    ],
)
def test_finish_reasons_of_the_reference(
    reply: dict[str, object], finish: str, has_content: bool
) -> None:
    with serve({"default": reply}) as sim:
        body = text_body("x", generationConfig={"maxOutputTokens": 3})
        for stream in (False, True):
            path = f"/v1beta/models/{FLASH}:" + (
                "streamGenerateContent?alt=sse" if stream else "generateContent"
            )
            response = post(sim, path, body)
            events = sse_events(response) if stream else [response.json()]
            for event in events:
                strict(event)
            candidate = events[-1]["candidates"][0]
            assert candidate["finishReason"] == finish
            contents = [e["candidates"][0].get("content") for e in events]
            assert any(c and c["parts"] for c in contents) == has_content
        if finish == "SAFETY":
            assert any(r.get("blocked") for r in candidate["safetyRatings"])
        if finish == "MALFORMED_FUNCTION_CALL":
            assert candidate["finishMessage"] == "Malformed function call: f"


def test_citations_grounding_and_code_execution_shapes() -> None:
    reply = Reply(
        text="Paris is the capital of France.",
        citations=[
            {
                "cited_text": "capital of France",
                "url": "https://example.com/paris",
                "title": "Paris",
            }
        ],
        server_tools=[
            ServerToolReply("web_search", {"query": "capital of France"}),
            ServerToolReply("code_execution", {"code": "print(1)"}, result={"stdout": "1\n"}),
        ],
    )
    with serve({"default": reply.model_dump(by_alias=True)}) as sim:
        for client in (gemini(sim), vertex(sim)):
            got = client.models.generate_content(model=FLASH, contents="x")
            candidate = got.candidates[0]
            citation = candidate.citation_metadata.citations[0]
            assert (citation.start_index, citation.end_index) == (13, 30)
            assert candidate.grounding_metadata.web_search_queries == ["capital of France"]
            assert (
                candidate.grounding_metadata.grounding_chunks[0].web.uri == "https://example.com/"
            )
            kinds = [
                p.executable_code is not None or p.code_execution_result is not None
                for p in candidate.content.parts
            ]
            assert kinds[:2] == [True, True]
            assert got.usage_metadata.tool_use_prompt_token_count > 0
        path = f"/v1beta/models/{FLASH}:generateContent"
        strict(post(sim, path, text_body("x")).json())


def test_implicit_caching_reports_a_repeated_prefix() -> None:
    long = "A long shared document. " * 300
    with serve() as sim:
        client = gemini(sim)
        first = client.models.generate_content(model=FLASH, contents=[long, "question one"])
        second = client.models.generate_content(model=FLASH, contents=[long, "question two"])
        assert first.usage_metadata.cached_content_token_count is None
        cached = second.usage_metadata.cached_content_token_count
        assert 1024 <= cached < second.usage_metadata.prompt_token_count
        assert second.usage_metadata.cache_tokens_details[0].token_count == cached


def test_media_parts_are_counted_by_modality() -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(b"png").decode()}}
    pdf = {"fileData": {"mimeType": "application/pdf", "fileUri": "https://example.com/a.pdf"}}
    with serve() as sim:
        body = {"contents": [{"role": "user", "parts": [{"text": "look"}, image, pdf]}]}
        raw = post(sim, f"/v1beta/models/{FLASH}:generateContent", body).json()
        details = {
            d["modality"]: d["tokenCount"] for d in raw["usageMetadata"]["promptTokensDetails"]
        }
        assert details["IMAGE"] == 85 and details["DOCUMENT"] == 85
        assert sum(details.values()) == raw["usageMetadata"]["promptTokenCount"]


def test_context_window_refusal() -> None:
    with serve(context_window=10) as sim:
        with pytest.raises(errors.ClientError) as refused:
            gemini(sim).models.generate_content(model=FLASH, contents="x" * 200)
        assert refused.value.status == "INVALID_ARGUMENT"
        assert refused.value.message == (
            "The input token count (54) exceeds the maximum number of tokens allowed (10)."
        )


def test_rate_limit_429_is_resource_exhausted_with_retry_info_and_no_headers() -> None:
    with serve(rate_limits=SimRateLimits(requests_per_minute=60)) as sim:
        client = gemini(sim)
        client.models.generate_content(model=FLASH, contents="x")
        raw = post(sim, f"/v1beta/models/{FLASH}:generateContent", text_body("x"))
        assert raw.status_code == 429
        assert "retry-after" not in raw.headers
        assert not [h for h in raw.headers if "ratelimit" in h.lower()]
        error = raw.json()["error"]
        assert error["status"] == "RESOURCE_EXHAUSTED" and error["code"] == 429
        kinds = {d["@type"].rsplit(".", 1)[-1]: d for d in error["details"]}
        assert kinds["RetryInfo"]["retryDelay"] == "1s"
        violation = kinds["QuotaFailure"]["violations"][0]
        assert violation["quotaDimensions"] == {"location": "global", "model": FLASH}
        assert violation["quotaValue"] == "60"
        assert "Please retry in" in error["message"]
        with pytest.raises(errors.ClientError) as refused:
            client.models.generate_content(model=FLASH, contents="x")
        assert refused.value.code == 429
        assert sim.stats().rate_limited == {"requests": 2}


def test_vertex_429_is_the_bare_message() -> None:
    with serve(rate_limits=SimRateLimits(requests_per_minute=60)) as sim:
        path = f"/v1/projects/p/locations/global/publishers/google/models/{FLASH}:generateContent"
        assert post(sim, path, text_body("x")).status_code == 200
        refused = post(sim, path, text_body("x")).json()["error"]
        assert refused["status"] == "RESOURCE_EXHAUSTED" and "details" not in refused
        assert refused["message"].startswith("Resource exhausted. Please try again later.")


def test_service_tiers_flex_priority_and_the_silent_downgrade() -> None:
    tiers = ServiceTiers(priority_downgrade_rate=1.0)
    with serve({"default": "ok"}, tiers=tiers) as sim:
        client = gemini(sim)
        flex = client.models.generate_content(
            model=FLASH, contents="x", config={"service_tier": "flex"}
        )
        assert flex.sdk_http_response.headers["x-gemini-service-tier"] == "flex"
        assert sim.requests[-1].body["serviceTier"] == "flex"
        priority = client.models.generate_content(
            model=FLASH, contents="x", config={"service_tier": "priority"}
        )
        assert priority.text == "ok"  # served, at standard, without an error
        assert priority.sdk_http_response.headers["x-gemini-service-tier"] == "standard"
        upper = post(
            sim,
            f"/v1beta/models/{FLASH}:generateContent",
            text_body("x", service_tier="SERVICE_TIER_FLEX"),
        )
        assert upper.headers["x-gemini-service-tier"] == "flex"
        wrong = post(
            sim, f"/v1beta/models/{FLASH}:generateContent", text_body("x", serviceTier="fast")
        )
        assert wrong.status_code == 400 and "service_tier" in wrong.json()["error"]["message"]
        on_vertex = vertex(sim).models.generate_content(
            model=FLASH, contents="x", config={"service_tier": "flex"}
        )
        assert on_vertex.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND_FLEX


def test_flex_shed_for_capacity_is_503_unavailable() -> None:
    with serve({"default": "ok"}, tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        with pytest.raises(errors.ServerError) as shed:
            gemini(sim).models.generate_content(
                model=FLASH, contents="x", config={"service_tier": "flex"}
            )
        assert shed.value.code == 503 and shed.value.status == "UNAVAILABLE"
        assert gemini(sim).models.generate_content(model=FLASH, contents="x").text == "ok"
        assert sim.stats().admitted_requests == 1  # the shed request was never charged


def test_faults_are_google_errors() -> None:
    script = [
        {"match": {"last_user": "boom"}, "reply": {"fault": {"kind": "status", "status": 500}}},
        {
            "match": {"last_user": "mid"},
            "reply": {
                "text": "partial answer that streams",
                "fault": {"kind": "stream_error", "status": 503, "after_chunks": 1},
            },
        },
    ]
    with serve(script) as sim:
        with pytest.raises(errors.ServerError) as failed:
            gemini(sim).models.generate_content(model=FLASH, contents="boom")
        assert failed.value.status == "INTERNAL"
        events = sse_events(
            post(sim, f"/v1beta/models/{FLASH}:streamGenerateContent?alt=sse", text_body("mid"))
        )
        assert events[-1]["error"]["status"] == "UNAVAILABLE"


def test_stats_count_gemini_requests_tokens_and_peaks() -> None:
    with serve({"default": "ok"}) as sim:
        client = gemini(sim)
        for _ in range(3):
            client.models.generate_content(
                model=FLASH, contents="hello", config={"max_output_tokens": 10}
            )
        stats = sim.stats()
        assert stats.by_api["gemini"] == 3
        assert stats.admitted_requests == 3
        assert stats.admitted_output_tokens == 30
        assert stats.peak_requests_per_second >= 1


async def test_the_concurrency_cap_answers_with_retry_info_and_no_header() -> None:
    import asyncio

    import httpx

    hold = {"default": {"text": "slow", "latency_ms": 300}}
    async with serve(hold, max_concurrency=1, retry_after=2) as sim, httpx.AsyncClient() as http:
        url = f"{sim.url}/v1beta/models/{FLASH}:generateContent"
        first = asyncio.ensure_future(http.post(url, json=text_body("a")))
        await sim.wait_until(lambda s: s.in_flight == 1)
        refused = await http.post(url, json=text_body("b"))
        assert (await first).status_code == 200
    assert refused.status_code == 429 and "retry-after" not in refused.headers
    error = refused.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert error["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}
    ]
