"""Inputs at the boundary, against the simulator on both wires: history given as plain
dicts (OpenAI chat shape, Anthropic content blocks) reaches the provider as the
messages it means; anything else fails the run before a request; a tool's return value
reaches the model as JSON, or as a tool error naming its type, never as a `repr`."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from typing import Any

import pytest
from agent_support import Recorder, drain, make_model

import raygent
from raygent.errors import InvalidOptionsError
from raygent.messages import ToolMessage
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.sim._plan import thinking_signature

PROVIDERS = ["openai", "anthropic"]
OK = [Rule(reply=Reply(text="ok"))]

OPENAI_HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "Answer in French."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is 2+3?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_7", "content": "5"},
    {"role": "assistant", "content": "Cinq."},
]

THINKING = "The user wants a lookup."
ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Look up raygent."}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": THINKING, "signature": thinking_signature(THINKING)},
            {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "raygent"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_9",
                "content": [{"type": "text", "text": "an agent runtime"}],
                "is_error": False,
            }
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "An agent runtime."}]},
]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_openai_shaped_history_reaches_the_provider(provider: str) -> None:
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        result = await bot.execute("And 3+4?", history=OPENAI_HISTORY)
        body = sim.requests[0].body
    assert result.ok, result.error
    assert body is not None
    sent = body["messages"]
    if provider == "openai":
        assert sent == [
            {"role": "system", "content": "Answer in French."},
            OPENAI_HISTORY[1],
            {**OPENAI_HISTORY[2], "content": None},
            OPENAI_HISTORY[3],
            OPENAI_HISTORY[4],
            {"role": "user", "content": "And 3+4?"},
        ]
    else:
        assert body["system"] == [{"type": "text", "text": "Answer in French."}]
        assert sent == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is 2+3?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_7", "name": "add", "input": {"a": 2, "b": 3}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "5"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Cinq."}]},
            {"role": "user", "content": [{"type": "text", "text": "And 3+4?"}]},
        ]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_anthropic_shaped_history_reaches_the_provider(provider: str) -> None:
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        events, result = await drain(bot.stream("Thanks!", history=ANTHROPIC_HISTORY))
        body = sim.requests[0].body
    assert result.ok, result.error
    assert events
    assert body is not None
    sent = body["messages"]
    if provider == "anthropic":
        # The signed thinking block goes back verbatim; the tool result keeps its id.
        assert sent[:2] == ANTHROPIC_HISTORY[:2]
        result_block = {
            "type": "tool_result",
            "tool_use_id": "toolu_9",
            "content": "an agent runtime",
        }
        assert sent[2] == {"role": "user", "content": [result_block]}
        assert sent[3] == ANTHROPIC_HISTORY[3]
        assert sent[4] == {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}
    else:
        assert sent == [
            {"role": "user", "content": "Look up raygent."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_9",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "raygent"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_9", "content": "an agent runtime"},
            {"role": "assistant", "content": "An agent runtime."},
            {"role": "user", "content": "Thanks!"},
        ]


@pytest.mark.parametrize(
    ("history", "where"),
    [
        ([{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}], "history[1]"),
        ("hello", "history"),
        ([1, 2], "history[0]"),
        ([{"role": "user", "content": "a"}, {"role": "tool", "content": "5"}], "history[1]"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"arguments": ""}}]},
            ],
            "history[3]",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_bad_history_fails_the_run_before_any_request(
    history: Any, where: str, mode: str
) -> None:
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model("openai", sim))
        if mode == "execute":
            result = await bot.execute("hi", history=history)
        else:
            _, result = await drain(bot.stream("hi", history=history))
        requests = sim.stats().requests
    assert result.report.status == "failed"
    assert isinstance(result.error, InvalidOptionsError)
    assert result.error.message.startswith(where)
    assert result.error.details["option"] == "history"
    assert requests == 0


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_input_given_as_message_dicts_runs(provider: str) -> None:
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        result = await bot.execute(
            [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
        )
        bad = await bot.execute([{"role": "user", "content": 12}])
        requests = sim.stats().requests
    assert result.ok, result.error
    assert isinstance(bad.error, InvalidOptionsError)
    assert bad.error.message.startswith("input[0]")
    assert requests == 1


@pytest.mark.parametrize("value", [42, None, 3.5, b"bytes", {"text": "no role"}])
@pytest.mark.parametrize("mode", ["execute", "execute_sync", "stream"])
async def test_an_input_that_is_no_message_fails_in_raygents_words(value: Any, mode: str) -> None:
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model("openai", sim))
        if mode == "execute":
            result = await bot.execute(value)
        elif mode == "execute_sync":
            result = bot.execute_sync(value)
        else:
            _, result = await drain(bot.stream(value))
        requests = sim.stats().requests
    assert result.report.status == "failed"
    assert isinstance(result.error, InvalidOptionsError)
    assert result.error.message.startswith("input: expected text, a message"), result.error
    assert type(value).__name__ in result.error.message
    assert "not iterable" not in result.error.message
    assert requests == 0


class Opaque:
    """No JSON form: the model must never see its repr."""


class Level(enum.Enum):
    HIGH = "high"


@dataclasses.dataclass
class Reading:
    at: datetime.datetime
    day: datetime.date
    value: decimal.Decimal
    sensor: uuid.UUID
    level: Level
    tags: tuple[str, ...]


@raygent.tool
def read_sensor() -> Reading:
    """The latest reading."""
    return Reading(
        at=datetime.datetime(2024, 5, 1, 12, 30),
        day=datetime.date(2024, 5, 1),
        value=decimal.Decimal("21.50"),
        sensor=uuid.UUID(int=7),
        level=Level.HIGH,
        tags=("indoor",),
    )


@raygent.tool
def opaque() -> Any:
    """Returns something that has no JSON form."""
    return {"handle": Opaque()}


def _tool_script(name: str) -> list[Rule]:
    return [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply(name, {})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="done")),
    ]


async def test_a_tool_result_is_sent_as_json() -> None:
    async with serve(_tool_script("read_sensor")) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[read_sensor])
        result = await bot.execute("read it", capture_messages=True)
        body = sim.requests[1].body
    assert result.ok, result.error
    assert body is not None
    tool_turn = body["messages"][-1]
    assert tool_turn["role"] == "tool"
    assert tool_turn["content"] == (
        '{"at":"2024-05-01T12:30:00","day":"2024-05-01","value":"21.50",'
        '"sensor":"00000000-0000-0000-0000-000000000007","level":"high","tags":["indoor"]}'
    )


@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_a_tool_result_with_no_json_form_is_a_tool_error(mode: str) -> None:
    recorder = Recorder()
    async with serve(_tool_script("opaque")) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim), tools=[opaque], on={"*": recorder})
        if mode == "execute":
            result = await bot.execute("go", capture_messages=True)
        else:
            _, result = await drain(bot.stream("go", capture_messages=True))
        body = sim.requests[1].body
    assert result.ok, result.error
    assert body is not None
    tool_result = body["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["is_error"] is True
    sent = str(tool_result["content"])
    assert "returned a dict holding a value of type Opaque that cannot be sent as JSON" in sent
    assert " at 0x" not in sent and "object" not in sent
    failed = recorder.of("agent.tool.failed")
    assert [f.name for f in failed] == ["opaque"]
    assert "Opaque" in failed[0].error["message"]
    assert recorder.of("agent.tool.called") == []
    messages = result.report.messages or []
    answer = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(answer) == 1 and answer[0].is_error
    assert result.report.tool_calls[0].error is not None


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_history_with_an_unanswered_tool_call_is_refused_before_any_request(
    provider: str,
) -> None:
    unanswered = [
        {"role": "user", "content": "What is 2+3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "Never mind."},
    ]
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        result = await bot.execute("And 3+4?", history=unanswered)
        sent = len(sim.requests)
    assert result.error is not None and result.error.code == "INVALID_OPTIONS"
    assert str(result.error).endswith("history[1]: tool call 't1' has no result")
    assert sent == 0
    # Answered, the same history goes through.
    answered = [*unanswered[:2], {"role": "tool", "tool_call_id": "t1", "content": "5"}]
    async with serve(OK) as sim:
        bot = raygent.agent(model=make_model(provider, sim))
        assert (await bot.execute("And 3+4?", history=answered)).ok
