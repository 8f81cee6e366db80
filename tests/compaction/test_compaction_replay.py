"""What a compacted conversation looks like to a provider and to the caller: a summary
is framed so the transcript stays user-first and valid on both wires, summaries and
kept signed turns carry their markers (never sent), and the final blocks are withheld
once a compaction applied."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from compaction_support import USER_FRAME, Recorder, is_summary, lookup, signed_block, tool_model

import raygent
from raygent import AssistantMessage, Message, UserMessage
from raygent.compaction.ranges import has_signed_reasoning
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.testing import FunctionModel, reply

HISTORY = [
    UserMessage(content="earlier question " + "q" * 300),
    AssistantMessage(content="earlier answer " + "a" * 300),
    UserMessage(content="another question " + "q" * 300),
    AssistantMessage(content="another answer " + "a" * 300),
]


def compacting(model: Any, summarize: Any, **options: Any) -> raygent.Agent:
    spec = raygent.Compaction(
        after_tokens=options.pop("after_tokens", 250),
        keep=options.pop("keep", 0),
        summarize=summarize,
        count_tokens=options.pop("count_tokens", None),
    )
    return raygent.agent(
        model=model, system_prompt="You help.", compaction=spec, capture_messages=True, **options
    )


def check_anthropic_body(body: dict[str, Any]) -> None:
    """What the Messages API requires: user first, roles alternating, tool results first
    in their turn, thinking first in an assistant turn; and no marker of ours."""
    turns = body["messages"]
    roles = [turn["role"] for turn in turns]
    assert roles[0] == "user", roles
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for turn in turns:
        kinds = [block["type"] for block in turn["content"]]
        if turn["role"] == "user":
            assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result"), kinds
        elif "thinking" in kinds:
            assert kinds[0] == "thinking", kinds
    assert '"compaction"' not in json.dumps(body)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_summary_of_the_first_turns_goes_in_as_user_context(provider: str) -> None:
    summarizer = Recorder()
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        if provider == "anthropic":
            model: Any = raygent.AnthropicModel(
                "sim-claude", base_url=sim.anthropic_base_url, api_key="sk-local"
            )
        else:
            model = raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-l")
        result = await compacting(model, summarizer).execute("now", history=HISTORY)
        [body] = [r.body for r in sim.requests if r.body]
    assert result.ok, result.error
    [decision] = result.report.compactions
    assert decision.status == "applied" and decision.replaces_from_index == 1
    assert decision.framing == "user"
    assert summarizer.slices == [HISTORY]
    messages = result.report.messages
    assert messages is not None and is_summary(messages[1], summarizer.text)
    assert messages[1] == UserMessage(content=USER_FRAME + summarizer.text, compaction="summary")
    summary_text = USER_FRAME + summarizer.text
    if provider == "anthropic":
        check_anthropic_body(body)
        # The summary and the input are adjacent user turns: one turn, both blocks.
        assert body["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": summary_text},
                    {"type": "text", "text": "now"},
                ],
            }
        ]
    else:
        assert [m["role"] for m in body["messages"]] == ["system", "user", "user"]
        assert body["messages"][1]["content"] == summary_text
        assert '"compaction"' not in json.dumps(body)


async def test_signed_turns_kept_after_a_summary_make_a_valid_anthropic_request() -> None:
    script = [
        Rule(
            match=Match(has_tools=True),
            reply=Reply(thinking="plan the lookup", tool_calls=[ToolCallReply("lookup", {"n": 1})]),
            times=5,
        ),
        Rule(reply=Reply(text="All looked up.")),
    ]
    async with serve(script) as sim:
        model = raygent.AnthropicModel(
            "sim-claude", base_url=sim.anthropic_base_url, api_key="sk-local"
        )
        summarizer = Recorder()
        agent = compacting(model, summarizer, tools=[lookup], after_tokens=400, keep=2)
        result = await agent.execute("look it up")
        bodies = [r.body for r in sim.requests if r.body]
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert applied and all(d.framing == "user" and d.retained for d in applied)
    for body in bodies:
        check_anthropic_body(body)
    # The summary (user context) is followed by a kept turn starting with its thinking.
    first = bodies[applied[0].trip_index]["messages"]
    at = next(k for k, t in enumerate(first) if summarizer.text in json.dumps(t["content"]))
    assert first[at]["role"] == "user" and first[at + 1]["content"][0]["type"] == "thinking"


def marked(messages: list[Message], marker: str) -> list[int]:
    return [k for k, m in enumerate(messages) if m.compaction == marker]


async def test_kept_signed_turns_and_the_summary_carry_their_markers() -> None:
    model, summarizer = tool_model(5, blocks=lambda trip: [signed_block()]), Recorder()
    agent = compacting(model, summarizer, tools=[lookup], after_tokens=300, keep=2)
    result = await agent.execute("look")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert applied
    for decision in applied:
        # The conversation the trip after the decision was sent (our own messages).
        request, _ = model.requests[decision.trip_index]
        assert set(decision.retained) <= set(marked(request, "retained"))
        assert marked(request, "summary") == [decision.replaces_from_index]
        assert all(has_signed_reasoning(request[k]) for k in marked(request, "retained"))
    messages = result.report.messages
    assert messages is not None
    assert marked(messages, "summary") and marked(messages, "retained")
    unmarked = [m for m in messages if m.compaction is None]
    assert messages[0] in unmarked and UserMessage(content="look") in unmarked


async def test_after_a_compaction_even_a_single_trip_gives_no_blocks() -> None:
    def answer(messages: list[Message], options: Any) -> Any:
        return reply("done", blocks=[signed_block()])

    plain = await compacting(FunctionModel(answer), Recorder()).execute("now")
    assert plain.report.compactions == [] and plain.blocks == [signed_block()]
    result = await compacting(FunctionModel(answer), Recorder()).execute("now", history=HISTORY)
    assert result.ok and len(result.report.trips) == 1
    assert [d.status for d in result.report.compactions] == ["applied"]
    assert result.blocks is None


async def test_a_custom_counter_counts_each_trip_and_each_proposed_replacement() -> None:
    counted: list[list[Message]] = []

    def count(messages: list[Message], options: raygent.ModelOptions) -> int:
        counted.append(messages)
        return 100 * len(messages)

    model, summarizer = tool_model(6), Recorder()
    agent = compacting(
        model, summarizer, tools=[lookup], after_tokens=500, keep=2, count_tokens=count
    )
    result = await agent.execute("look")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert applied and len(applied) == len(summarizer.slices)
    assert len(counted) == len(model.requests) + len(summarizer.slices)
    proposals = [m for m in counted if any(is_summary(x, summarizer.text) for x in m)]
    # Each proposal was counted before its trip's request (which is the proposal).
    for decision in applied:
        request, _ = model.requests[decision.trip_index]
        assert request in proposals


async def test_not_smaller_is_judged_by_the_custom_counter() -> None:
    def flat(messages: list[Message], options: Any) -> int:
        return 10_000  # the summary saves nothing, whatever its length in characters

    model, summarizer = tool_model(3), Recorder()
    agent = compacting(
        model, summarizer, tools=[lookup], after_tokens=500, keep=2, count_tokens=flat
    )
    result = await agent.execute("look")
    assert result.ok and summarizer.slices
    # The first trips have nothing to replace (keep=2); every later decision is
    # not-smaller.
    reasons = [d.reason for d in result.report.compactions]
    assert reasons == ["no-safe-range"] * 2 + ["not-smaller"] * 2
    assert [len(m) for m, _ in model.requests] == [2, 4, 6, 8]

    # A summary longer in characters than what it replaces, but fewer messages: the
    # counter says smaller, so it applies.
    def by_messages(messages: list[Message], options: Any) -> int:
        return 100 * len(messages)

    wordy = Recorder(text="a very long summary " * 200)
    agent = compacting(tool_model(4), wordy, tools=[lookup], keep=2, count_tokens=by_messages)
    result = await agent.execute("look")
    assert result.ok and "applied" in {d.status for d in result.report.compactions}


async def test_a_counter_failing_on_the_proposal_is_a_callback_error_with_the_count() -> None:
    def count(messages: list[Message], options: Any) -> int:
        if any(m.compaction == "summary" for m in messages):
            raise OSError("the counting endpoint is down")
        return 100 * len(messages)

    model = tool_model(4)
    agent = compacting(
        model, Recorder(), tools=[lookup], after_tokens=500, keep=2, count_tokens=count
    )
    result = await agent.execute("look")
    assert result.ok
    decisions = result.report.compactions
    assert decisions and {d.reason for d in decisions} == {"callback-error"}
    assert all(d.input_tokens is not None and d.input_tokens > 500 for d in decisions)
    assert [len(m) for m, _ in model.requests] == [2, 4, 6, 8, 10]
