"""`raygent.compaction.summarize`: the transcript it sends, the summary it takes, the
replies it refuses; and a whole compacting run against the simulator over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from compaction_support import SIGNED, lookup, signed_block, tool_model

import raygent
from raygent import (
    AssistantMessage,
    ImagePart,
    ProviderBlock,
    TextPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from raygent.compaction import CompactionContext, SummaryError, summarize
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.testing import ScriptedModel, reply

SLICE = [
    UserMessage(content=[TextPart(text="What is in the box?"), ImagePart(url="https://x/a.png")]),
    AssistantMessage(
        content=[signed_block(), TextPart(text="Let me open it.")],
        tool_calls=[ToolCall.parse("call_7", "open_box", '{"box": "blue"}')],
    ),
    ToolMessage(call_id="call_7", name="open_box", content="a red ball"),
    ToolMessage(call_id="call_8", name="open_box", content="locked", is_error=True),
    AssistantMessage(content=[ProviderBlock(provider="openai", kind="reasoning", data={"x": 1})]),
]


def context(**fields: Any) -> CompactionContext:
    values: dict[str, Any] = {
        "trip_index": 4,
        "input_tokens": 9000,
        "counting": "estimate",
        "signal": raygent.AbortController().signal,
        "from_index": 2,
        "to_index": 7,
        **fields,
    }
    return CompactionContext(**values)


async def test_the_slice_goes_as_a_tagged_transcript_without_reasoning() -> None:
    usage = Usage(requests=1, input_tokens=120, output_tokens=30)
    model = ScriptedModel(
        [reply("Sure.\n<summary>\nA red ball was found.\n</summary>", usage=usage)]
    )
    told: list[Usage] = []
    result = await summarize(model=model, max_tokens=256, on_usage=told.append)(SLICE, context())
    assert result.summary == AssistantMessage(content="A red ball was found.")
    assert (result.replaces_from_index, result.replaces_to_index) == (2, 7)
    assert result.usage == usage and told == [usage]
    [(request, options)] = model.requests
    assert options.max_tokens == 256
    assert request[0].role == "system" and "<summary>" in request[0].text
    transcript = request[1].text
    assert transcript.startswith("<transcript>") and transcript.endswith("</transcript>")
    assert "<user>What is in the box?[image]</user>" in transcript
    assert '<tool_call id="call_7" name="open_box">{"box": "blue"}</tool_call>' in transcript
    assert '<tool_result id="call_7" name="open_box">a red ball</tool_result>' in transcript
    assert 'error="true">locked</tool_result>' in transcript
    # Signed reasoning and other provider blocks never leave their turn.
    assert SIGNED["thinking"] not in transcript and SIGNED["signature"] not in transcript
    assert '"x"' not in transcript


async def test_custom_instructions_and_an_async_on_usage() -> None:
    model = ScriptedModel(["<summary>short</summary>"])
    told: list[Usage] = []

    async def on_usage(usage: Usage) -> None:
        told.append(usage)

    summarizer = summarize(model=model, max_tokens=64, instructions="Be brief.", on_usage=on_usage)
    result = await summarizer(SLICE[:1], context())
    assert result.summary.text == "short" and len(told) == 1
    assert model.requests[0][0][0].text == "Be brief."


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (reply("<summary>half a summ", finish="length"), "cut off"),
        (reply("I can't help with that.", finish="refusal"), "refused"),
        (reply("<summary>   </summary>"), "no <summary>"),
        (reply("A summary without the tags."), "no <summary>"),
        (reply(""), "no <summary>"),
    ],
    ids=["truncated", "refused", "blank", "untagged", "empty"],
)
async def test_an_unusable_reply_raises(step: Any, message: str) -> None:
    told: list[Usage] = []
    summarizer = summarize(model=ScriptedModel([step]), max_tokens=64, on_usage=told.append)
    with pytest.raises(SummaryError, match=message):
        await summarizer(SLICE, context())
    assert len(told) == 1  # the tokens were spent all the same


async def test_a_truncated_summary_skips_the_decision_in_a_run() -> None:
    cheap = ScriptedModel([reply("<summary>cut", finish="length")] * 8)
    spec = raygent.Compaction(
        after_tokens=300, keep=2, summarize=summarize(model=cheap, max_tokens=16)
    )
    model = tool_model(3)
    result = await raygent.agent(model=model, tools=[lookup], compaction=spec).execute("look")
    assert result.ok
    decisions = result.report.compactions
    assert decisions and {d.reason for d in decisions} == {"callback-error"}
    assert decisions[0].error is not None and decisions[0].error["code"] == "COMPACTION_SUMMARY"
    assert [len(m) for m, _ in model.requests] == [1, 3, 5, 7]


SUMMARY = "The user asked for lookups; results 0 and 1 were found."


async def test_a_compacting_run_against_the_simulator_over_http() -> None:
    script = [
        # The summariser (identified by its instructions) answers with a summary.
        Rule(
            match=Match(system="compact the history"),
            reply=Reply(text=f"<summary>{SUMMARY}</summary>"),
        ),
        Rule(
            match=Match(has_tools=True),
            reply=Reply(tool_calls=[ToolCallReply("lookup", {"n": 1})]),
            times=4,
        ),
        Rule(match=Match(has_tools=True), reply=Reply(text="All looked up.")),
    ]
    async with serve(script) as sim:
        main = raygent.OpenAIModel("gpt-4o", base_url=sim.openai_base_url, api_key="sk-local")
        cheap = raygent.OpenAIModel("gpt-4o-mini", base_url=sim.openai_base_url, api_key="sk-local")
        spent: list[Usage] = []
        compaction = raygent.Compaction(
            after_tokens=400,
            keep=2,
            summarize=summarize(model=cheap, max_tokens=200, on_usage=spent.append),
        )
        agent = raygent.agent(
            model=main, tools=[lookup], compaction=compaction, capture_messages=True
        )
        result = await agent.execute("look it up")
        assert result.ok, result.error
        assert result.text == "All looked up."
        applied = [d for d in result.report.compactions if d.status == "applied"]
        assert applied and all(d.usage is not None for d in applied)
        assert len(spent) == len(applied)
        # The summariser's requests went to the cheap model; the agent's to the main one.
        bodies = [r.body for r in sim.requests if r.body]
        by_model = {b["model"] for b in bodies if "compact the history" in str(b["messages"][0])}
        assert by_model == {"gpt-4o-mini"}
        last = [b for b in bodies if b["model"] == "gpt-4o"][-1]
        contents = [m.get("content") for m in last["messages"]]
        assert SUMMARY in contents
        assert result.report.messages is not None
        assert AssistantMessage(content=SUMMARY, compaction="summary") in result.report.messages


def test_the_default_instructions_and_the_transcript_renderer_are_exported() -> None:
    # For custom summarisers, as the reference exports them.
    from raygent.compaction import DEFAULT_INSTRUCTIONS, render_transcript
    from raygent.messages import AssistantMessage, UserMessage

    assert "<summary>" in DEFAULT_INSTRUCTIONS
    shown = render_transcript([UserMessage(content="Owls?"), AssistantMessage(content="Hoot.")])
    assert "Owls?" in shown and "Hoot." in shown
