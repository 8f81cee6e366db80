"""Streaming on Ray: the stream is read where the run is (no Ray call per chunk, nor per
trip); aborts close the HTTP request."""

from __future__ import annotations

import asyncio

import pytest
import ray
from ray_support import NAMESPACE, backend, sim_model, wait_for

import raygent
from raygent import AbortController
from raygent.actors import gateway_names
from raygent.errors import AgentCancelledError
from raygent.sim import Fault, Latency, Reply, Rule, serve

pytestmark = pytest.mark.usefixtures("ray_session")

LONG = "word " * 640  # 3200 characters: 200 stream chunks from the simulator


async def test_a_stream_costs_no_ray_call_per_chunk_nor_per_trip() -> None:
    async with serve([Rule(reply=Reply(text=LONG))], latency=Latency(per_token_ms=0.2)) as sim:
        bot = raygent.agent(model=sim_model(sim), backend=backend())
        await bot.execute("warm up")  # the lease is taken
        gateway = ray.get_actor(gateway_names(1)[0], namespace=NAMESPACE)
        before = (await gateway.stats.remote())["syncs"]
        results = []
        for _ in range(3):
            stream = bot.stream("hi")
            deltas = [e.text async for e in stream if e.type == "agent.trip.streaming"]
            results.append((await stream.result, deltas))
        syncs = (await gateway.stats.remote())["syncs"] - before
    for result, deltas in results:
        assert result.ok and result.text == LONG and "".join(deltas) == LONG
        assert len(deltas) > 100  # chunk by chunk, as they came
    assert syncs <= 2  # three streamed trips: at most a heartbeat of the lease


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
