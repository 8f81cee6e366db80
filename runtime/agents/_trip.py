"""One model trip: send the conversation, stream or not, report what came back."""

from __future__ import annotations

import time

from ..errors import AbortedError, MaxTripsError, ProviderResponseError
from ..messages import ContentPart, TextPart
from ..models.contract import (
    Done,
    ModelResponse,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from ..observers.events import (
    ToolStreaming,
    TripCompleted,
    TripReasoning,
    TripStarted,
    TripStreaming,
    TripUsage,
)
from ..observers.report import Timing, TripReport
from ..seams.contract import ModelAccess
from ..seams.link import closing_stream
from ..seams.request import ModelRequest, RequestRecord
from ..usage import total_cost
from ._compact import compact_before_trip, record_server_compaction
from ._guard import GuardBuffer, extract_tool_calls
from ._state import RunState, maybe_await, now

__all__ = ["model_trip"]


async def model_trip(run: RunState, purpose: str) -> ModelResponse:
    """Make trip number `run.trip_count`; raise MaxTripsError past the budget."""
    index = run.trip_count
    if index >= run.config.max_trips:
        raise MaxTripsError(
            f"the run needs more than max_trips={run.config.max_trips} model trips",
            max_trips=run.config.max_trips,
        )
    await compact_before_trip(run, index)  # a no-op without `compaction=`
    started, clock = now(), time.perf_counter()
    trip = TripReport(
        index=index,
        purpose=purpose,
        timing=Timing(started_at=started),
        session_id=run.info.session_id,
    )
    run.report.trips.append(trip)
    run.phase = "trip"
    await run.emit(TripStarted, trip_index=index, purpose=purpose)
    record = RequestRecord()  # what the access layer met on this trip
    try:
        response = await _send(run, index, record)
        response = _guarded(run, response)
        for mw in reversed(run.config.middleware):
            response = await maybe_await(mw.after_trip(run.info, response))
    except AbortedError as exc:
        if exc.usage is not None:  # cut off after it was sent: the provider may bill it
            run.usage = run.usage + exc.usage
            trip.usage = exc.usage
        raise
    finally:  # a failed or cancelled trip has an end too
        trip.rate_wait, trip.throttled = record.rate_wait, record.throttled
        trip.timing.ended_at = now()
        trip.timing.duration = time.perf_counter() - clock
    run.usage = run.usage + response.usage
    trip.finish_reason = response.finish_reason
    trip.output = response.text
    trip.usage = response.usage
    trip.tool_calls = [c.call_id for c in response.tool_calls]
    trip.attempts = list(response.attempts)
    if response.via is not None:
        trip.via, trip.provider_batch, trip.batch_wait = response.via
    trip.cache, trip.saved = response.cache, total_cost(response.saved) or 0.0
    trip.service_tier = response.service_tier
    trip.response_model = response.model
    if response.provider != run.config.model.provider:
        trip.response_provider = response.provider
    record_server_compaction(run, index, response)
    run.phase = "between_trips"  # the reply is in: what follows is not mid-trip
    await run.emit(
        TripCompleted,
        trip_index=index,
        finish_reason=response.finish_reason,
        text=response.text,
        usage=response.usage,
        rate_wait=trip.rate_wait,
        throttled=trip.throttled,
    )
    return response


async def _send(run: RunState, index: int, record: RequestRecord) -> ModelResponse:
    config = run.config
    for mw in config.middleware:
        short = await maybe_await(mw.before_trip(run.info, list(run.messages), config.options))
        if short is not None:
            return short  # type: ignore[no-any-return]
    try:
        access = config.models(index)
        request = run.request(index, record)
        if config.streaming and config.scope.lines is None:  # (a line's reply comes whole)
            return await _streamed(run, index, access, request)
        return await access.complete(request)
    except BaseException as exc:
        for mw in config.middleware:
            await maybe_await(mw.on_trip_error(run.info, exc))
        raise


async def _streamed(
    run: RunState, index: int, access: ModelAccess, request: ModelRequest
) -> ModelResponse:
    config = run.config
    guard = GuardBuffer(config.guard_max_buffer) if config.guard_max_buffer else None
    response: ModelResponse | None = None
    chunks = access.stream(request)
    async with closing_stream(chunks):
        async for chunk in chunks:
            if isinstance(chunk, Done):
                response = chunk.response
            else:
                await _relay(run, index, chunk, guard)
    if response is None:
        raise ProviderResponseError(
            "the model's stream ended without a final reply", provider=config.model.provider
        )
    if guard is not None:
        # Text held back because it might have been a tool call, and was not one.
        rest = guard.finish(_guarded(run, response).text)
        if rest:
            await run.emit(TripStreaming, trip_index=index, text=rest)
    return response


async def _relay(run: RunState, index: int, chunk: StreamChunk, guard: GuardBuffer | None) -> None:
    """Turn one stream chunk into its event."""
    if isinstance(chunk, TextDelta):
        text = guard.feed(chunk.text) if guard is not None else chunk.text
        if text:
            await run.emit(TripStreaming, trip_index=index, text=text)
    elif isinstance(chunk, ToolCallDelta):
        await run.emit(
            ToolStreaming,
            trip_index=index,
            call_id=chunk.call_id,
            name=chunk.name,
            arguments_delta=chunk.arguments_delta,
        )
    elif isinstance(chunk, ReasoningDelta):
        await run.emit(TripReasoning, trip_index=index, text=chunk.text)
    elif isinstance(chunk, UsageChunk):
        await run.emit(TripUsage, trip_index=index, usage=chunk.usage)


def _guarded(run: RunState, response: ModelResponse) -> ModelResponse:
    """Turn tool-call JSON the model wrote as text into real calls (when guarded)."""
    if not run.config.guard_max_buffer or len(response.text) > run.config.guard_max_buffer:
        return response
    found = extract_tool_calls(response.text, run.config.tools, response.tool_calls)
    if found is None:
        return response
    text, calls = found
    calls = [*response.tool_calls, *calls]
    content: list[ContentPart] = [p for p in response.content if not isinstance(p, TextPart)]
    if text:
        content.append(TextPart(text=text))
    finish = "tool_calls" if calls else response.finish_reason
    return response.model_copy(
        update={"content": content, "tool_calls": calls, "finish_reason": finish}
    )
