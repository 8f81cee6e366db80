"""A batch runner keeps an aborted batch until its driver's last call has come (issue
44.5): Ctrl-C on Ray printed, one run in three, a `KeyError` traceback from the runner's
`close`. The race: an aborted pool ends before its feed does, the runner's results
stream ended and forgot the batch, and the driver's `close` (sent as it stopped, and
any chunk sent before it) then came for a batch the runner no longer had.

The runner is driven here in this process, call by call, in the order that lost the
race (the Ray half, a real SIGINT on a shared Ray, is tests/batch/test_batch_interrupt.py).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator, Iterator

import pytest
import ray.cloudpickle

import raygent.seams.registry
from raygent.actors.batch.runner import BatchRunner, ResultBatch
from raygent.backend import Job, Retry
from raygent.seams.batch import BatchItem
from raygent.seams.local import LOCAL

pytestmark = pytest.mark.usefixtures("ray_session")


async def hang(item: int) -> int:
    await asyncio.Event().wait()  # never ends: only an abort ends it
    return item


@pytest.fixture
def runner() -> Iterator[BatchRunner]:
    previous = raygent.seams.registry.current_backend()
    made = BatchRunner(LOCAL)  # sets its backend for the process, as in a worker
    try:
        yield made
    finally:
        raygent.seams.registry.use_backend(previous)


async def items_of(stream: AsyncIterator[ResultBatch], count: int) -> list[BatchItem]:
    """The next `count` items the results stream gives back."""
    found: list[BatchItem] = []
    while len(found) < count:
        pickled, _, _, _ = await asyncio.wait_for(anext(stream), 30)
        found += [pickle.loads(data) for _, data in pickled]
    return found


async def collect(stream: AsyncIterator[ResultBatch]) -> list[ResultBatch]:
    return [batch async for batch in stream]


async def test_a_close_after_the_aborted_pool_ended_finds_its_batch(runner: BatchRunner) -> None:
    payload = ray.cloudpickle.dumps(hang)
    await runner.open("b", payload, None, 2, Retry(attempts=1), 0.0)
    await runner.submit("b", 0, [Job(0, 0, input=0), Job(1, 1, input=1)])
    stream = runner.results("b")
    pool = runner._batches["b"].pool
    for _ in range(1000):  # turns of the loop until both jobs run (no wait for time)
        if pool.running == 2:
            break
        await asyncio.sleep(0)
    assert pool.running == 2
    await runner.abort("b", "interrupted (Ctrl-C)")
    ended = await items_of(stream, 2)  # the pool has ended: both cancelled, given back
    assert sorted(item.status for item in ended) == ["cancelled", "cancelled"]
    assert {item.error.code for item in ended} == {"ABORTED"}  # type: ignore[union-attr]
    # The driver reads on, as it does; the stream does not end (and forget the batch)
    # while the driver's last calls are on their way.
    rest = asyncio.ensure_future(collect(stream))
    for _ in range(20):  # turns of the loop for the stream (not a wait for time)
        await asyncio.sleep(0)
    assert not rest.done() and "b" in runner._batches
    # They come now: a chunk sent before the driver stopped, then its close (two chunks
    # in all). Neither finds the batch gone.
    await runner.submit("b", 1, [Job(2, 2, input=2)])
    await runner.close("b", 2)
    late = await asyncio.wait_for(rest, 30)  # the stream ends: the feed is whole
    assert all(not pickled for pickled, _, _, _ in late)  # the late job was not run
    assert "b" not in runner._batches  # forgotten only now


async def test_a_close_before_the_last_chunk_waits_for_it(runner: BatchRunner) -> None:
    """Ray may run a caller's `close` before its last `submit`: the count says when the
    feed is whole, aborted or not."""
    payload = ray.cloudpickle.dumps(hang)
    await runner.open("c", payload, None, 2, Retry(attempts=1), 0.0)
    stream = runner.results("c")
    await runner.abort("c", "stop")
    await runner.close("c", 1)  # before chunk 0 has come
    waiting = asyncio.ensure_future(anext(stream))
    task = runner._batches["c"].task
    assert task is not None
    await task  # the aborted pool has ended
    for _ in range(20):  # turns of the loop for the stream (not a wait for time)
        await asyncio.sleep(0)
    assert not waiting.done() and "c" in runner._batches
    await runner.submit("c", 0, [Job(0, 0, input=0)])
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 30)
    assert "c" not in runner._batches
