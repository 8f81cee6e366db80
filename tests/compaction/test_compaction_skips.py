"""Skipped decisions leave the conversation as it was; an abort ends the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from compaction_support import Recorder, lookup, tool_model

import raygent
from raygent import AssistantMessage, CompactionResult, UserMessage
from raygent.compaction import CompactionContext
from raygent.errors import AgentCancelledError
from raygent.testing import FunctionModel, hang


def compacting(summarize: Any, model: Any = None, **compaction: Any) -> tuple[Any, Any]:
    model = model or tool_model(3)
    spec = raygent.Compaction(**{"after_tokens": 300, "keep": 2, **compaction}, summarize=summarize)
    return raygent.agent(model=model, tools=[lookup], compaction=spec), model


def uncompacted_requests(rounds: int) -> list[int]:
    """How long each request of a tool_model(rounds) run is without compaction."""
    return [1 + 2 * trip for trip in range(rounds + 1)]


async def test_no_safe_range_is_recorded_and_the_run_goes_on() -> None:
    # One trip: the conversation is the input alone, which is never replaced.
    agent, _ = compacting(Recorder(), model=tool_model(0))
    result = await agent.execute("a long question " + "q" * 2000)
    assert result.ok and result.text == "done"
    [decision] = result.report.compactions
    assert decision.status == "skipped" and decision.reason == "no-safe-range"
    assert decision.trip_index == 0 and decision.counting == "estimate"
    assert decision.input_tokens is not None and decision.input_tokens > 500
    assert decision.replaces_from_index is None


async def test_a_summary_no_smaller_than_what_it_replaces_is_skipped() -> None:
    summarizer = Recorder(text="a very long summary " * 200)
    agent, model = compacting(summarizer)
    result = await agent.execute("look")
    assert result.ok
    assert summarizer.slices  # it was asked
    assert {d.reason for d in result.report.compactions} == {"not-smaller"}
    assert [len(m) for m, _ in model.requests] == uncompacted_requests(3)


def raises(history: list[Any], ctx: CompactionContext) -> CompactionResult:
    raise RuntimeError("the summariser is down")


def out_of_range(history: list[Any], ctx: CompactionContext) -> CompactionResult:
    return CompactionResult(AssistantMessage(content="s"), 0, ctx.to_index)


def splits_a_group(history: list[Any], ctx: CompactionContext) -> CompactionResult:
    # Ends right after a tool call, before its result.
    return CompactionResult(AssistantMessage(content="s"), ctx.from_index, ctx.from_index + 1)


def empty(history: list[Any], ctx: CompactionContext) -> CompactionResult:
    return CompactionResult(AssistantMessage(content="  "), ctx.from_index, ctx.to_index)


def not_assistant(history: list[Any], ctx: CompactionContext) -> Any:
    return CompactionResult(UserMessage(content="s"), ctx.from_index, ctx.to_index)  # type: ignore[arg-type]


def wrong_type(history: list[Any], ctx: CompactionContext) -> Any:
    return "just a string"


async def failing_async(history: list[Any], ctx: CompactionContext) -> CompactionResult:
    await asyncio.sleep(0)
    raise ValueError("async failure")


@pytest.mark.parametrize(
    "summarize",
    [raises, out_of_range, splits_a_group, empty, not_assistant, wrong_type, failing_async],
)
async def test_a_failing_or_invalid_summariser_is_a_callback_error(summarize: Any) -> None:
    agent, model = compacting(summarize)
    result = await agent.execute("look")
    assert result.ok and result.text == "done"
    decisions = result.report.compactions
    assert decisions and {d.reason for d in decisions} == {"callback-error"}
    assert all(d.error and d.error["message"] for d in decisions)
    # Generation went on with the original conversation every time.
    assert [len(m) for m, _ in model.requests] == uncompacted_requests(3)


async def test_a_failing_count_tokens_is_a_callback_error_with_no_count() -> None:
    def count(messages: list[Any], options: Any) -> int:
        raise OSError("the counting endpoint is down")

    agent, _ = compacting(Recorder(), count_tokens=count)
    result = await agent.execute("look")
    assert result.ok
    assert len(result.report.compactions) == 4  # one per trip
    for decision in result.report.compactions:
        assert decision.reason == "callback-error" and decision.input_tokens is None
        assert decision.counting == "custom" and decision.error is not None
        assert decision.error["type"] == "OSError"


async def test_an_abort_while_summarising_cancels_the_run() -> None:
    controller = raygent.AbortController()
    summarizer_model = FunctionModel(lambda messages, options: hang())
    requests = []

    async def summarize(history: list[Any], ctx: CompactionContext) -> CompactionResult:
        requests.append(ctx)
        controller.abort("user left")  # fires while the summariser's request is open
        await summarizer_model.complete(history, signal=ctx.signal)
        raise AssertionError("unreachable: the request hangs until aborted")

    agent, model = compacting(summarize)
    result = await agent.execute("look", signal=controller.signal)
    assert result.status == "cancelled"
    assert isinstance(result.error, AgentCancelledError)
    assert result.error.details["reason"] == "user left"
    assert len(requests) == 1 and requests[0].signal.aborted
    assert len(model.requests) == requests[0].trip_index  # no trip after the abort
    assert result.report.compactions == []


async def test_a_summariser_failing_because_of_the_abort_cancels_the_run() -> None:
    controller = raygent.AbortController()

    trips: list[int] = []

    def summarize(history: list[Any], ctx: CompactionContext) -> CompactionResult:
        trips.append(ctx.trip_index)
        controller.abort("stop")
        raise RuntimeError("interrupted")

    agent, model = compacting(summarize)
    result = await agent.execute("look", signal=controller.signal)
    assert result.status == "cancelled" and result.report.compactions == []
    assert trips == [len(model.requests)]  # the trip it ran before was never made


async def test_cancelling_the_task_while_summarising_records_the_cancel() -> None:
    started = asyncio.Event()

    async def summarize(history: list[Any], ctx: CompactionContext) -> CompactionResult:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        raise AssertionError("unreachable")

    agent, _ = compacting(summarize)
    task = asyncio.ensure_future(agent.execute("look"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
