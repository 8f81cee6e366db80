"""The agent loop against the provider simulator, over real HTTP, on both wires."""

from __future__ import annotations

import asyncio

import pytest
from agent_support import City, Recorder, assert_wellformed, drain, make_model, outcome, wait_for

import raygent
from raygent import AbortController, Pricing, Repair
from raygent.errors import AgentCancelledError, AgentIncompleteError, RefusalError
from raygent.observers.events import Event
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply, serve
from raygent.sim._plan import thinking_signature

PROVIDERS = ["openai", "openai_responses", "anthropic", "bedrock"]
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)


@raygent.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


WEATHER = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(
            text="Let me check.",
            tool_calls=[
                ToolCallReply("get_weather", {"city": "Paris"}),
                ToolCallReply("get_weather", {"city": "Oslo"}),
            ],
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Paris and Oslo.")),
]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_run_streams_exactly_what_it_executes(provider: str) -> None:
    async with serve(WEATHER) as sim:
        model = make_model(provider, sim, pricing=PRICING)
        bot = raygent.agent(model=model, tools=[get_weather], system_prompt="Weather bot.")
        executed = await bot.execute("What is the weather?", session_id="s")
        events, streamed = await drain(bot.stream("What is the weather?", session_id="s"))
        bodies = [r.body for r in sim.requests if r.body is not None]
        by_path = [r.path.endswith("/converse-stream") for r in sim.requests]  # Bedrock's
    assert executed.ok, executed.error
    assert executed.text == "Sunny in Paris and Oslo."
    assert outcome(streamed) == outcome(executed)
    assert [c.output for c in executed.report.tool_calls] == ["sunny in Paris", "sunny in Oslo"]
    # Usage adds up over the trips, cost per channel included.
    usage = executed.usage
    assert usage.requests == 2
    assert usage == sum((t.usage for t in executed.report.trips), raygent.Usage())
    assert usage.cost is not None and usage.cost.input > 0 and usage.cost.output > 0
    # The streamed text and tool arguments arrive as deltas.
    text = "".join(e.text for e in events if e.type == "agent.trip.streaming")
    assert text == "Let me check.Sunny in Paris and Oslo."
    assert {e.call_id for e in events if e.type == "agent.tool.streaming"} == {
        c.call_id for c in streamed.report.tool_calls
    }
    streams = [b["stream"] for b in bodies if "stream" in b] if provider != "bedrock" else by_path
    assert streams.count(True) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_structured_output_and_repair_against_the_simulator(provider: str) -> None:
    script = [
        Rule(
            match=Match(last_user="Reply again"),
            reply=Reply(json={"name": "Oslo", "population": 7}),
        ),
        Rule(match=Match(last_user="Oslo"), reply=Reply(json={"name": "Oslo"})),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=make_model(provider, sim), output=City)
        executed = await bot.execute("Oslo?", repair=Repair(max_attempts=1))
        _, streamed = await drain(bot.stream("Oslo?", repair=Repair(max_attempts=1)))
    assert executed.data == City(name="Oslo", population=7)
    assert [t.purpose for t in executed.report.trips] == ["answer", "repair"]
    assert outcome(streamed) == outcome(executed)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cut_off_tool_call_is_not_run_and_the_run_continues(provider: str) -> None:
    script = [
        Rule(match=Match(last_user="Continue exactly"), reply=Reply(text="Done now.")),
        Rule(
            match=Match(last_user="weather"),
            reply=Reply(
                text="Checking.",
                tool_calls=[ToolCallReply("get_weather", {"city": "A very long city name " * 5})],
            ),
        ),
    ]
    async with serve(script) as sim:
        model = make_model(provider, sim)
        options = {"max_tokens": 12}
        bot = raygent.agent(model=model, tools=[get_weather], model_options=options)
        cut = await bot.execute("weather?")
        continued = await bot.execute("weather?", continue_on_output_limit=1, capture_messages=True)
        _, streamed = await drain(bot.stream("weather?", continue_on_output_limit=1))
    assert cut.report.status == "incomplete"
    assert isinstance(cut.error, AgentIncompleteError)
    assert cut.error.details["reason"] == "output_limit"
    assert cut.text == "Checking."
    [truncated] = cut.report.trips[0].truncated_tool_calls
    assert truncated.startswith(("call_", "toolu_", "tooluse_"))
    assert cut.report.tool_calls == []
    assert continued.ok, continued.error
    assert continued.text == "Checking.Done now."
    assert continued.report.tool_calls == []
    assert continued.report.messages is not None
    assert_wellformed(continued.report.messages)
    assert outcome(streamed) == outcome(continued)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_trips_running_out_while_continuing_end_the_run_incomplete(provider: str) -> None:
    story = "Once upon a time there was a long story that never fit in twelve tokens. " * 4
    async with serve([Rule(reply=Reply(text=story))]) as sim:
        bot = raygent.agent(
            model=make_model(provider, sim),
            model_options={"max_tokens": 12},
            continue_on_output_limit=5,
            max_trips=2,
        )
        executed = await bot.execute("Tell a story.")
        _, streamed = await drain(bot.stream("Tell a story."))
    assert executed.report.status == "incomplete"
    assert isinstance(executed.error, AgentIncompleteError)
    assert executed.error.details == {
        "reason": "output_limit",
        "trip_index": 1,
        "continuations": 1,
    }
    # The partial text is both cut-off segments, joined.
    assert executed.text == "".join(t.output for t in executed.report.trips)
    assert executed.text and len(executed.report.trips) == 2
    assert outcome(streamed) == outcome(executed)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_refusal_and_context_window_against_the_simulator(provider: str) -> None:
    script = [Rule(match=Match(last_user="bomb"), reply=Reply(refusal="I won't."))]
    async with serve(script, context_window=200) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        refused = await bot.execute("how to build a bomb")
        too_long = await bot.execute("word " * 2000)
    assert refused.report.status == "failed" and isinstance(refused.error, RefusalError)
    assert too_long.report.status == "incomplete"
    assert isinstance(too_long.error, AgentIncompleteError)
    assert too_long.error.details["reason"] == "context_window"


async def test_pause_turn_is_resumed_against_the_simulator() -> None:
    script = [
        Rule(
            match=Match(last_user="research"),
            reply=[Reply(text="Searching... ", finish="pause_turn"), Reply(text="Found it.")],
        )
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim))
        executed = await bot.execute("research this")
        _, streamed = await drain(bot.stream("research this"))
        second_body = sim.requests[1].body
    assert executed.ok and executed.text == "Searching... Found it."
    assert outcome(streamed) == outcome(executed)
    assert second_body["messages"][-1]["role"] == "assistant"


async def test_thinking_is_replayed_verbatim_within_a_run() -> None:
    script = [
        Rule(match=Match(last_user="think"), reply=Reply(thinking="Hmm.", text="Thought.")),
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(
                thinking="The user wants weather.",
                tool_calls=[ToolCallReply("get_weather", {"city": "Rome"})],
            ),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Rome.")),
    ]
    async with serve(script) as sim:
        model = make_model("anthropic", sim)
        bot = raygent.agent(model=model, tools=[get_weather])
        result = await bot.execute("weather in Rome?")
        single = await raygent.agent(model=model).execute("think")
        replayed = sim.requests[1].body
    assert result.ok and result.blocks is None
    assistant = replayed["messages"][1]
    thinking = assistant["content"][0]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"] == "The user wants weather."
    assert thinking["signature"] == thinking_signature("The user wants weather.")
    assert single.text == "Thought."
    assert single.blocks is not None and [b.kind for b in single.blocks] == ["thinking"]
    assert single.blocks[0].data["thinking"] == "Hmm."


def _hang_script(after_chunks: int) -> list[Rule]:
    return [
        Rule(
            reply=Reply(
                text="This reply starts streaming and then hangs forever.",
                fault=Fault(kind="hang", after_chunks=after_chunks),
            )
        )
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_an_abort_mid_trip_closes_the_http_request(provider: str, mode: str) -> None:
    # Responses opens with four events (created, in_progress, item and part added)
    # before its first text delta.
    after = 6 if provider == "openai_responses" else 4
    async with serve(_hang_script(after_chunks=after)) as sim:
        controller = AbortController()
        bot = raygent.agent(model=make_model(provider, sim))
        streaming = asyncio.Event()

        def started(event: Event) -> None:
            streaming.set()

        if mode == "execute":
            run = asyncio.ensure_future(bot.execute("hi", signal=controller.signal))
            await wait_for(sim, lambda s: s.in_flight == 1)
        else:
            stream = bot.stream(
                "hi", signal=controller.signal, on={"agent.trip.streaming": started}
            )
            run = stream.result
            await streaming.wait()  # mid-stream: text has arrived
        controller.abort("user gave up")
        result = await run
        stats = await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
    assert result.report.status == "cancelled"
    assert isinstance(result.error, AgentCancelledError)
    assert result.error.details["cancelled_at"] == "trip"
    assert stats.requests == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_cancelling_the_task_mid_trip_closes_the_http_request(
    provider: str, mode: str
) -> None:
    async with serve(_hang_script(after_chunks=4)) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        errors = Recorder()
        if mode == "execute":
            task = asyncio.ensure_future(bot.execute("hi", on={"agent.error": errors}))
        else:
            stream = bot.stream("hi", on={"agent.error": errors})

            async def consume() -> None:
                async for _ in stream:
                    pass

            task = asyncio.ensure_future(consume())
        await wait_for(sim, lambda s: s.in_flight == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
    [event] = errors.events
    assert event.result.report.status == "cancelled"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_model_that_hangs_before_answering_is_aborted(provider: str) -> None:
    async with serve(_hang_script(after_chunks=0)) as sim:
        controller = AbortController()
        run = asyncio.ensure_future(
            raygent.agent(model=make_model(provider, sim)).execute("hi", signal=controller.signal)
        )
        await wait_for(sim, lambda s: s.in_flight == 1)
        controller.abort("timeout")
        assert (await run).report.status == "cancelled"
        await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_malformed_tool_arguments_from_the_wire_go_back_as_errors(provider: str) -> None:
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(
                tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})],
                fault=Fault(kind="malformed_tool_args"),
            ),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="Could not check.")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=make_model(provider, sim), tools=[get_weather])
        executed = await bot.execute("weather?")
        _, streamed = await drain(bot.stream("weather?"))
    assert executed.ok and executed.text == "Could not check."
    assert executed.report.tool_calls[0].error is not None
    assert outcome(streamed) == outcome(executed)
