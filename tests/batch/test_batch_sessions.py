"""Items that name a session run in input order within it, each to its final outcome
(retries included) before the next of that session starts; other sessions' items run
meanwhile. (On Ray, tests/ray/test_ray_batch.py checks the same across runners.)"""

from __future__ import annotations

import asyncio
from typing import Any

from batch_support import fast_retry

import raygent
from raygent import Memory, Message
from raygent.errors import ServerError
from raygent.stores import InMemoryStore, Scope
from raygent.testing import FunctionModel


class Recorder:
    """A model that records which question each run asks and how many run at once, and
    fails the first attempt of the questions in `flaky` (a retryable provider error)."""

    def __init__(self, flaky: set[str]) -> None:
        self.flaky = set(flaky)
        self.asked: list[str] = []
        self.running: dict[str, int] = {}
        self.peak_per_session = 0
        self.now = self.peak = 0

    async def __call__(self, messages: list[Message], options: Any) -> str:
        question = messages[-1].text
        session = question.split(":")[0]
        self.asked.append(question)
        self.running[session] = self.running.get(session, 0) + 1
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.peak_per_session = max(self.peak_per_session, self.running[session])
        try:
            await asyncio.sleep(0.005)  # runs overlap unless something keeps them apart
            if question in self.flaky:
                self.flaky.discard(question)
                raise ServerError("try again", provider="test", status=503)
            return f"answer to {question}"
        finally:
            self.running[session] -= 1
            self.now -= 1


def _rows(sessions: int, per_session: int) -> list[dict[str, str]]:
    # Interleaved: s0:0, s1:0, s2:0, s0:1, ... as a dataset of many users usually is.
    return [
        {"input": f"s{s}:{i}", "session_id": f"s{s}"}
        for i in range(per_session)
        for s in range(sessions)
    ]


async def test_a_sessions_items_run_one_after_another_in_input_order() -> None:
    model, store = Recorder(flaky={"s0:0", "s1:2"}), InMemoryStore()
    agent = raygent.agent(model=FunctionModel(model), memory=Memory(store, "turn"))
    result = await raygent.batch(
        agent, _rows(3, 6), concurrency=8, retry=fast_retry(attempts=3), progress=False
    )
    assert result.report.succeeded == 18 and result.report.retries == 2
    assert model.peak_per_session == 1  # never two items of a session at once
    assert model.peak == 3  # but the three sessions ran side by side
    for s in range(3):
        asked = [q for q in model.asked if q.startswith(f"s{s}:")]
        # In input order; a failed attempt is retried before the next item starts.
        expected = [f"s{s}:{i}" for i in range(6)]
        if s == 0:
            expected.insert(0, "s0:0")
        if s == 1:
            expected.insert(3, "s1:2")
        assert asked == expected
        history = await store.load(Scope(f"s{s}"))
        assert [m.text for m in history[::2]] == [f"s{s}:{i}" for i in range(6)]
        # Each run saw every earlier item's question and answer of its session.
        assert [m.text for m in history[1::2]] == [f"answer to s{s}:{i}" for i in range(6)]


async def test_items_of_a_busy_session_wait_without_holding_a_slot() -> None:
    model = Recorder(flaky=set())
    agent = raygent.agent(model=FunctionModel(model), memory=Memory(InMemoryStore(), "run"))
    # Ten items of one session first, then ten sessionless items: those must not wait
    # behind the session's queue for a slot.
    rows: list[Any] = [{"input": f"busy:{i}", "session_id": "busy"} for i in range(10)]
    rows += [f"free{i}:q" for i in range(10)]
    result = await raygent.batch(agent, rows, concurrency=4, progress=False)
    assert result.report.succeeded == 20
    assert model.peak_per_session == 1
    free_done = max(model.asked.index(f"free{i}:q") for i in range(10))
    assert free_done < model.asked.index("busy:9")  # they ran while the session queued


async def test_a_cancelled_batch_ends_the_queued_items_of_a_session_cancelled() -> None:
    started, gate = asyncio.Event(), asyncio.Event()

    async def slow(messages: list[Message], options: Any) -> str:
        started.set()
        await gate.wait()
        return "late"

    agent = raygent.agent(model=FunctionModel(slow), memory=Memory(InMemoryStore(), "turn"))
    controller = raygent.AbortController()
    rows = [{"input": f"q{i}", "session_id": "one"} for i in range(5)]
    running = asyncio.ensure_future(
        raygent.batch(agent, rows, concurrency=5, signal=controller.signal, progress=False)
    )
    await asyncio.wait_for(started.wait(), 10)  # the first item runs, four wait their turn
    controller.abort("enough")
    result = await asyncio.wait_for(running, 10)
    assert [item.status for item in result.items] == ["cancelled"] * 5
