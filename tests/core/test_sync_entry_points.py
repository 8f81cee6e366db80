"""The `*_sync` entry points from inside a running event loop (a notebook, a FastAPI
handler calling sync code) and from none: correct results, no warning, nothing leaked
across many calls, Ctrl-C cancels. Against the provider simulator over real HTTP, with
real SQLite and Redis stores."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import raygent
from raygent import Memory
from raygent.models.openai import OpenAIModel
from raygent.observers.events import AgentCompleted, AgentErrored, Event
from raygent.observers.report import AgentResult
from raygent.sim import Latency, Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.stores import RedisStore, SQLiteStore

CALLS = 200
SLACK = 4  # sockets / threads a run may leave (a pool opened once, a store's worker)

SCRIPT = [
    Rule(
        match=Match(last_user="stall", after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("stall", {})]),
    ),
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"})]),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Oslo.")),
    Rule(match=Match(), reply=Reply(text="hello")),
]


@raygent.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with serve(SCRIPT) as running:
        yield running


def delete_prefix(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)


def agent(sim: Simulator, **options: Any) -> raygent.Agent:
    model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-sim")
    return raygent.agent(model=model, tools=[get_weather], **options)


def sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listing itself, closed by now
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def settled(baseline: tuple[int, int]) -> tuple[int, int]:
    """Sockets and threads, once the simulator's side of closed connections has closed
    too (it closes them on its own thread): a bounded wait on the condition."""
    deadline = threading.Event()
    timer = threading.Timer(10.0, deadline.set)
    timer.start()
    try:
        while True:
            now = (sockets(), threading.active_count())
            if (
                now[0] <= baseline[0] + SLACK and now[1] <= baseline[1] + SLACK
            ) or deadline.is_set():
                return now
            deadline.wait(0.01)
    finally:
        timer.cancel()
        timer.join()


# -- inside a running loop -------------------------------------------------------------


async def test_agent_execute_sync_inside_a_running_loop(sim: Simulator) -> None:
    result = agent(sim).execute_sync("What is the weather?")
    assert result.ok, result.error
    assert result.text == "Sunny in Oslo."
    assert [c.output for c in result.report.tool_calls] == ["sunny in Oslo"]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_session_execute_sync_inside_a_running_loop(
    sim: Simulator, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    prefix = f"raygent-synctest-{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        store: Any = SQLiteStore(tmp_path / "sync.db")
    else:
        url = request.getfixturevalue("redis_url")
        store = RedisStore(url, prefix=prefix)
    session = agent(sim, memory=Memory(store)).session("s1")
    try:
        first = session.execute_sync("one")
        second = session.execute_sync("two")
        assert first.ok and second.ok, (first.error, second.error)
        assert second.text == "hello"
        history = await session.history()
        assert [m.text for m in history] == ["one", "hello", "two", "hello"]
    finally:
        await store.aclose()
        if kind == "redis":
            delete_prefix(url, prefix)


async def test_batch_sync_inside_a_running_loop(sim: Simulator) -> None:
    result = raygent.batch_sync(agent(sim), ["a", "b", "What is the weather?"], progress=False)
    assert result.ok, result.report
    assert [item.data for item in result.items] == ["hello", "hello", "Sunny in Oslo."]


async def test_many_sync_calls_in_a_running_loop_leak_no_sockets_or_threads(
    sim: Simulator,
) -> None:
    bot = agent(sim)
    assert bot.execute_sync("warm up").ok
    baseline = settled((sockets(), threading.active_count()))
    for _ in range(CALLS):
        assert bot.execute_sync("hi").ok
    after = settled(baseline)
    assert after[0] <= baseline[0] + SLACK, f"sockets: {baseline[0]} -> {after[0]}"
    assert after[1] <= baseline[1] + SLACK, f"threads: {baseline[1]} -> {after[1]}"


async def test_many_sync_calls_on_redis_sessions_in_a_running_loop_leak_nothing(
    sim: Simulator, redis_url: str
) -> None:
    """Each call's loop opens a Redis pool; the pool closes with that loop."""
    prefix = f"raygent-synctest-{uuid.uuid4().hex[:12]}"
    store = RedisStore(redis_url, prefix=prefix)
    bot = agent(sim, memory=Memory(store))
    try:
        assert bot.execute_sync("warm up", session_id="warm").ok
        baseline = settled((sockets(), threading.active_count()))
        for i in range(CALLS):
            assert bot.execute_sync("hi", session_id=f"s{i}").ok
        after = settled(baseline)
        assert after[0] <= baseline[0] + SLACK, f"sockets: {baseline[0]} -> {after[0]}"
        assert after[1] <= baseline[1] + SLACK, f"threads: {baseline[1]} -> {after[1]}"
        assert len(await store.load(bot.session(f"s{CALLS - 1}").scope)) == 2
    finally:
        await store.aclose()
        delete_prefix(redis_url, prefix)


def test_many_sync_calls_without_a_loop_leak_no_sockets_or_threads(sim: Simulator) -> None:
    bot = agent(sim)
    assert bot.execute_sync("warm up").ok
    baseline = settled((sockets(), threading.active_count()))
    for _ in range(CALLS):
        assert bot.execute_sync("hi").ok
    after = settled(baseline)
    assert after[0] <= baseline[0] + SLACK, f"sockets: {baseline[0]} -> {after[0]}"
    assert after[1] <= baseline[1] + SLACK, f"threads: {baseline[1]} -> {after[1]}"


# -- Ctrl-C ------------------------------------------------------------------------------


class Stall:
    """A tool that sends SIGINT to the main thread (as a kernel interrupt does), then
    waits to be cancelled; says whether it was."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    async def __call__(self) -> str:
        """Stall until cancelled."""
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.set()
        return "never"


@contextlib.contextmanager
def ctrl_c() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the main thread (as in a Jupyter kernel), not
    what the test's own loop runner set (asyncio.Runner cancels its main task)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stalling_agent(sim: Simulator, stall: Stall, ended: list[AgentResult]) -> raygent.Agent:
    tool = raygent.tool(name="stall")(stall.__call__)
    model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-sim")
    bot = raygent.agent(model=model, tools=[tool])

    def record(event: Event) -> None:
        if isinstance(event, (AgentCompleted, AgentErrored)):
            ended.append(event.result)

    bot.on("*", record)
    return bot


async def test_ctrl_c_during_execute_sync_in_a_running_loop_cancels_the_run(
    sim: Simulator,
) -> None:
    stall, ended = Stall(), list[AgentResult]()
    bot = stalling_agent(sim, stall, ended)
    threads = threading.active_count()
    with ctrl_c(), pytest.raises(KeyboardInterrupt):
        bot.execute_sync("stall")
    assert stall.cancelled.is_set()  # cancelled before the call came back
    assert threading.active_count() == threads  # the helper thread has ended
    assert [result.report.status for result in ended] == ["cancelled"]


async def test_ctrl_c_during_batch_sync_in_a_running_loop_cancels_the_batch(
    sim: Simulator,
) -> None:
    stall, ended = Stall(), list[AgentResult]()
    bot = stalling_agent(sim, stall, ended)
    with ctrl_c():
        result = raygent.batch_sync(bot, ["stall", "stall"], concurrency=1, progress=False)
    assert stall.cancelled.is_set()
    assert [item.status for item in result.items] == ["cancelled", "cancelled"]
    assert result.report.stopped is not None and "Ctrl-C" in result.report.stopped.message


def interrupt_when_in_flight(sim: Simulator) -> threading.Thread:
    """A watcher that sends SIGINT to the main thread once the simulator holds a request
    (a bounded wait on that condition)."""

    def watch() -> None:
        tick = threading.Event()
        for _ in range(2000):
            if sim.stats().in_flight >= 1:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                return
            tick.wait(0.005)

    watcher = threading.Thread(target=watch, name="interrupter")
    watcher.start()
    return watcher


async def test_ctrl_c_during_a_request_of_execute_sync_closes_the_request() -> None:
    with serve(SCRIPT, latency=Latency(fixed_ms=120_000)) as slow:
        ended = list[AgentResult]()
        bot = stalling_agent(slow, Stall(), ended)
        watcher = interrupt_when_in_flight(slow)
        try:
            with ctrl_c(), pytest.raises(KeyboardInterrupt):
                bot.execute_sync("hi")
        finally:
            watcher.join()
        stats = await slow.wait_until(lambda s: s.disconnects >= 1)
        assert stats.in_flight == 0
    assert [result.report.status for result in ended] == ["cancelled"]
