"""Streaming through a gateway: chunks cross in batches; aborts close the HTTP request."""

from __future__ import annotations

import asyncio

import pytest
import ray
from ray_support import backend, sim_model, wait_for

import raygent
from raygent import AbortController, ModelOptions, UserMessage
from raygent.actors import Gateway, GatewayLimits, StreamBatching
from raygent.errors import AgentCancelledError
from raygent.models.contract import Done
from raygent.sim import Fault, Latency, Reply, Rule, serve

pytestmark = pytest.mark.usefixtures("ray_session")

LONG = "word " * 640  # 3200 characters: 200 stream chunks from the simulator


async def test_a_stream_crosses_in_batches_not_per_chunk() -> None:
    # ~2 ms between chunks: a batch closes on its 20 ms linger, or at 32 chunks.
    script = [Rule(reply=Reply(text=LONG))]
    async with serve(script, latency=Latency(per_token_ms=0.5)) as sim:
        gateway = ray.remote(Gateway).remote(GatewayLimits(batching=StreamBatching()))
        model = sim_model(sim)
        items = []
        async for ref in gateway.stream.remote(model, [UserMessage(content="hi")], ModelOptions()):
            items.append(await ref)
        ray.kill(gateway)
    chunks = [chunk for item in items for chunk in item]
    assert isinstance(chunks[-1], Done) and chunks[-1].response.text == LONG
    assert len(chunks) > 200
    assert len(items[0]) == 1  # the first chunk goes at once
    assert all(len(item) <= 32 for item in items)
    assert len(items) < len(chunks) / 4


async def test_the_agent_streams_through_the_gateway() -> None:
    async with serve([Rule(reply=Reply(text=LONG))]) as sim:
        bot = raygent.agent(model=sim_model(sim), backend=backend())
        stream = bot.stream("hi")
        deltas = [e.text async for e in stream if e.type == "agent.trip.streaming"]
        result = await stream.result
    assert result.ok and result.text == LONG
    assert "".join(deltas) == LONG


def _hang_script(after_chunks: int) -> list[Rule]:
    text = "This reply starts streaming and then hangs forever."
    return [Rule(reply=Reply(text=text, fault=Fault(kind="hang", after_chunks=after_chunks)))]


@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_an_abort_mid_trip_closes_the_http_request(mode: str) -> None:
    async with serve(_hang_script(after_chunks=4)) as sim:
        controller = AbortController()
        bot = raygent.agent(model=sim_model(sim), backend=backend())
        streaming = asyncio.Event()
        if mode == "execute":
            run = asyncio.ensure_future(bot.execute("hi", signal=controller.signal))
            await wait_for(sim, lambda s: s.in_flight == 1)
        else:
            stream = bot.stream(
                "hi",
                signal=controller.signal,
                on={"agent.trip.streaming": lambda event: streaming.set()},
            )
            run = stream.result
            await streaming.wait()  # mid-stream: text has arrived
        controller.abort("user gave up")
        result = await run
        stats = await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
    assert result.report.status == "cancelled"
    assert isinstance(result.error, AgentCancelledError)
    assert stats.requests == 1


async def test_cancelling_the_task_closes_the_http_request() -> None:
    async with serve(_hang_script(after_chunks=0)) as sim:
        bot = raygent.agent(model=sim_model(sim), backend=backend())
        task = asyncio.ensure_future(bot.execute("hi"))
        await wait_for(sim, lambda s: s.in_flight == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
