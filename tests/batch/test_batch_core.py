"""The in-flight core through `raygent.batch`: ordering, bounds, streaming, isolation,
cancellation. Nothing here sleeps to synchronise: events and yields only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from batch_support import Sleeps, fast_retry, shouting_agent, yield_a_few

import raygent
from raygent import AbortController
from raygent._batch import BatchItem, InputError, Retry, batch, batch_sync
from raygent.errors import AbortedError, RateLimitError
from raygent.testing import FunctionModel


async def test_data_follows_the_input_order_whatever_order_items_end_in() -> None:
    n = 10
    done = [asyncio.Event() for _ in range(n + 1)]
    done[n].set()
    ended: list[int] = []

    async def last_first(i: int) -> str:
        await done[i + 1].wait()  # item i ends only after item i+1: reverse order
        done[i].set()
        return f"r{i}"

    result = await batch(
        last_first, range(n), concurrency=n, on_item=lambda it: ended.append(it.index)
    )
    assert ended == list(reversed(range(n)))
    assert result.data == [f"r{i}" for i in range(n)]
    assert [item.index for item in result.items] == list(range(n))
    assert result.ok and result.report.succeeded == n


async def test_an_agent_batch_keys_items_and_keeps_their_metadata() -> None:
    items = ["a", {"input": "b", "id": "x", "lang": "en"}, [{"role": "user", "content": "c"}]]
    result = await batch(shouting_agent(), items)
    assert result.data == ["A", "B", "C"]
    assert [item.key for item in result.items] == [0, "x", 2]
    assert result.items[1].meta == {"id": "x", "lang": "en"}
    assert result.items[0].result.ok and result.usage.requests == 3


async def test_item_key_picks_a_field_or_calls_a_function() -> None:
    rows = [{"input": "a", "ref": "r1"}, {"input": "b", "ref": "r2"}]
    by_field = await batch(shouting_agent(), rows, item_key="ref")
    by_call = await batch(shouting_agent(), rows, item_key=lambda row: row["ref"].upper())
    assert [i.key for i in by_field.items] == ["r1", "r2"]
    assert [i.key for i in by_call.items] == ["R1", "R2"]
    missing = await batch(shouting_agent(), rows, item_key="nope")
    assert all(isinstance(i.error, InputError) for i in missing.items)
    assert missing.report.failed == 2


async def test_concurrency_is_reached_and_never_exceeded() -> None:
    in_flight = peak = 0

    async def step(messages: Any, options: Any) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await yield_a_few()
        in_flight -= 1
        return "ok"

    agent = raygent.agent(model=FunctionModel(step))
    result = await batch(agent, [f"q{i}" for i in range(60)], concurrency=7)
    assert result.ok and peak == 7


async def test_a_retrying_item_does_not_hold_a_slot() -> None:
    others_done = asyncio.Event()
    calls: dict[int, int] = {}

    async def flaky_first(i: int) -> int:
        calls[i] = calls.get(i, 0) + 1
        if i == 0 and calls[i] == 1:
            raise RateLimitError("busy")
        return i

    async def wait_for_others(seconds: float) -> None:
        await others_done.wait()  # deadlocks if item 0's wait kept the only slot

    def on_item(item: BatchItem) -> None:
        if item.index == 2:
            others_done.set()

    retry = Retry(sleep=wait_for_others, jitter=False)
    result = await batch(flaky_first, range(3), concurrency=1, retry=retry, on_item=on_item)
    assert result.data == [0, 1, 2] and result.items[0].attempts == 2


async def test_a_generator_is_consumed_only_as_slots_free_up() -> None:
    concurrency, delivered, ahead = 4, 0, 0
    controller = AbortController()

    def endless() -> Iterator[int]:
        nonlocal ahead
        i = 0
        while True:  # never ends: materialising it would hang the test
            ahead = max(ahead, i + 1 - delivered)
            yield i
            i += 1

    def on_item(item: BatchItem) -> None:
        nonlocal delivered
        delivered += 1
        if delivered == 200:
            controller.abort("enough")

    async def work(i: int) -> int:
        await yield_a_few()
        return i

    result = await batch(
        work, endless(), concurrency=concurrency, on_item=on_item, signal=controller.signal
    )
    assert ahead <= concurrency
    assert result.report.succeeded >= 200
    assert result.report.total <= 200 + concurrency
    assert str(result.report.stopped) == "cancelled: enough"


async def test_exceptions_of_the_executable_fail_their_item_only() -> None:
    async def picky(i: int) -> int:
        if i % 3 == 0:
            raise ValueError(f"no {i}")
        return i

    result = await batch(picky, range(9), retry=fast_retry())
    assert result.data == [None, 1, 2, None, 4, 5, None, 7, 8]
    failed = [i for i in result.items if i.status == "failed"]
    assert [str(i.error) for i in failed] == ["no 0", "no 3", "no 6"]
    assert all(i.attempts == 1 for i in failed)  # a ValueError is not retryable
    assert result.report.errors == {"ValueError": 3}


async def test_a_failing_source_ends_the_batch_with_what_it_gave() -> None:
    def breaks_after_three() -> Iterator[int]:
        yield from range(3)
        raise OSError("disk gone")

    async def same(i: int) -> int:
        return i

    result = await batch(same, breaks_after_three())
    assert result.data == [0, 1, 2, None]
    last = result.items[-1]
    assert isinstance(last.error, InputError) and last.error.fatal
    assert "disk gone" in str(last.error) and result.report.stopped is not None


async def test_an_on_item_that_raises_is_counted_and_isolated() -> None:
    def explode(item: BatchItem) -> None:
        raise RuntimeError("handler bug")

    async def async_explode(item: BatchItem) -> None:
        raise RuntimeError("async handler bug")

    for handler in (explode, async_explode):
        result = await batch(shouting_agent(), ["a", "b", "c"], on_item=handler)
        assert result.ok and result.data == ["A", "B", "C"]
        assert result.report.on_item_errors == 3
        assert "handler bug" in (result.report.first_on_item_error or "")


async def test_the_signal_cancels_unfinished_items_and_keeps_finished_ones() -> None:
    controller = AbortController()

    async def hangs_from_five(i: int) -> int:
        if i >= 5:
            await asyncio.Event().wait()  # only the abort ends it
        return i

    def on_item(item: BatchItem) -> None:
        if item.index == 4:
            controller.abort("stop now")

    result = await batch(
        hangs_from_five, range(20), concurrency=8, on_item=on_item, signal=controller.signal
    )
    statuses = [item.status for item in result.items]
    assert statuses == ["completed"] * 5 + ["cancelled"] * 15  # unread ones too
    assert result.data == [0, 1, 2, 3, 4] + [None] * 15
    assert all(isinstance(i.error, AbortedError) for i in result.items[5:])
    assert str(result.report.stopped) == "cancelled: stop now" and not result.ok


async def test_an_agent_batch_cancels_runs_in_flight_through_their_signal() -> None:
    controller = AbortController()
    started = 0

    async def step(messages: Any, options: Any) -> str:
        nonlocal started
        started += 1
        if started == 3:
            controller.abort("user")
        await asyncio.Event().wait()
        return "never"

    agent = raygent.agent(model=FunctionModel(step))
    result = await batch(agent, ["a", "b", "c", "d"], concurrency=3, signal=controller.signal)
    assert [i.status for i in result.items] == ["cancelled"] * 4
    assert result.items[0].result.status == "cancelled"  # the run itself was cancelled


async def test_cancelling_the_awaiting_task_records_unfinished_items() -> None:
    seen: list[BatchItem] = []
    two_done = asyncio.Event()

    async def hangs_after_two(i: int) -> int:
        if i >= 2:
            await asyncio.Event().wait()
        return i

    def on_item(item: BatchItem) -> None:
        seen.append(item)
        if len(seen) == 2:
            two_done.set()

    task = asyncio.ensure_future(batch(hangs_after_two, range(10), concurrency=4, on_item=on_item))
    await two_done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Every item taken ends once; those in flight end cancelled; none after is read.
    statuses = {i.index: i.status for i in seen}
    assert len(seen) == len(statuses) == 2 + 4  # the two done refilled two slots
    assert statuses == {0: "completed", 1: "completed"} | dict.fromkeys(range(2, 6), "cancelled")


def test_batch_sync_runs_from_plain_code() -> None:
    result = batch_sync(shouting_agent(), ["x", "y"], concurrency=2)
    assert result.data == ["X", "Y"] and result.report.throughput > 0
    assert result.report.latency_p50 is not None and result.report.latency_p95 is not None


async def test_options_that_make_no_sense_raise_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await batch(shouting_agent(), ["a"], concurrency=0)
    with pytest.raises(ValueError, match="resume"):
        await batch(shouting_agent(), ["a"], resume=True)
    with pytest.raises(TypeError, match=r"unknown option .concurency. .did you mean .concurrency"):
        await batch(shouting_agent(), ["a"], concurency=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="agent or an async callable"):
        await batch(42, ["a"])


async def test_sleeps_recorder_sees_no_retry_when_nothing_fails() -> None:
    sleeps = Sleeps()
    result = await batch(shouting_agent(), ["a"], retry=fast_retry(sleeps))
    assert result.ok and sleeps.delays == [] and result.report.retries == 0


async def test_a_progress_bar_counts_items_failures_and_retries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def picky(i: int) -> int:
        if i == 1:
            raise ValueError("no")
        return i

    result = await batch(picky, range(5), progress=True)
    assert result.report.failed == 1
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "5/5" in bar and "failed=1" in bar and "retrying=0" in bar


async def test_a_slow_async_source_does_not_hold_back_items_that_ended() -> None:
    """The next row arrives only after the first item is delivered: were the pool to
    await the source before settling what ended, this would never finish."""
    first_delivered = asyncio.Event()

    async def rows() -> Any:
        yield "a"
        await first_delivered.wait()
        yield "b"

    async def echo(item: str) -> str:
        return item.upper()

    def on_item(item: BatchItem) -> None:
        first_delivered.set()

    result = await asyncio.wait_for(batch(echo, rows(), concurrency=4, on_item=on_item), timeout=30)
    assert result.ok and result.data == ["A", "B"]
