"""A batch runner sends results back once an eighth of its slots have ended, without
waiting out `FLUSH_INTERVAL` (issue 38): a runner's slot is the driver's to refill only
when its result is back, so results held for a fixed interval left a third of the slots
idle at 100 ms a trip.

The runner class is driven in this process, without Ray (the actor is this class): the
interval is set to ten minutes, so a runner that waited it out would fail the bounded
wait here, while one that flushes on its share of ended items answers at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import ray.cloudpickle

from raygent.actors.batch import runner as runner_module
from raygent.actors.batch.runner import BatchRunner
from raygent.backend import Job, Retry
from raygent.seams.local import LOCAL
from raygent.seams.registry import use_backend

SLOTS = 16  # an eighth: 2 items


async def _echo(item: int) -> int:
    return item


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[BatchRunner]:
    monkeypatch.setattr(runner_module, "FLUSH_INTERVAL", 600.0)
    previous = use_backend(None)
    try:
        yield BatchRunner(LOCAL)
    finally:
        use_backend(previous)


async def test_a_runner_sends_results_back_once_an_eighth_of_its_slots_ended(
    runner: BatchRunner,
) -> None:
    await runner.open("b", ray.cloudpickle.dumps(_echo), None, SLOTS, Retry(attempts=1), 0.0)
    stream = runner.results("b")
    await runner.submit("b", 0, [Job(i, i, input=i) for i in range(4)])
    # The batch is still open (more chunks may come), yet its ended items come back now.
    first, _, _, _ = await asyncio.wait_for(anext(stream), 10)
    assert len(first) >= SLOTS // 8
    got = {index for index, _ in first}
    await runner.close("b", 1)
    async for items, _, _, _ in stream:
        got |= {index for index, _ in items}
    assert got == {0, 1, 2, 3}  # each item once, none held back
