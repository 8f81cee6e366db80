"""Errors are typed, carry code/category/retryable, pickle across workers, hide secrets."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

from raygent import AbortController
from raygent.abort import abortable
from raygent.errors import (
    AbortedError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    RateLimitError,
    RaygentError,
    ServerError,
    redact,
)


def test_every_error_has_code_category_and_retryable() -> None:
    err = RateLimitError("slow down", provider="openai", status=429, retry_after=2.5)
    assert (err.code, err.category, err.retryable) == ("rate_limited", "provider", True)
    assert err.retry_after == 2.5 and err.status == 429
    assert isinstance(err, ProviderError) and isinstance(err, RaygentError)
    assert not InvalidRequestError("bad").retryable
    assert isinstance(ContextLengthExceededError("big"), InvalidRequestError)
    assert RateLimitError("quota", retryable=False).retryable is False


def test_errors_survive_pickling() -> None:
    err = ServerError("boom", provider="anthropic", status=529, request_id="req_1")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ServerError
    assert again.to_dict() == err.to_dict()
    assert str(again) == "boom"


def test_to_dict_is_json_ready() -> None:
    info = RateLimitError("x", provider="openai", retry_after=1.0).to_dict()
    assert info == {
        "type": "RateLimitError",
        "code": "rate_limited",
        "category": "provider",
        "retryable": True,
        "message": "x",
        "provider": "openai",
        "retry_after": 1.0,
    }


def test_missing_detail_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = ServerError("x").nothing_here


def test_redact_hides_keys() -> None:
    text = "Incorrect API key provided: sk-proj-abc123XYZ. Header: Bearer sk-abcdefgh1234."
    out = redact(text, ("my-own-secret",))
    assert "sk-proj-abc123XYZ" not in out and "abcdefgh1234" not in out
    assert redact("key my-own-secret here", ("my-own-secret",)) == "key *** here"


async def test_abortable_cancels_the_await_and_raises_typed() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    controller.abort("user pressed stop")
    with pytest.raises(AbortedError) as info:
        await task
    assert info.value.reason == "user pressed stop"
    assert controller.signal.aborted


async def test_abort_from_another_thread() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    thread = threading.Thread(target=controller.abort, args=("from a thread",))
    thread.start()
    with pytest.raises(AbortedError):
        await task
    thread.join()


async def test_an_already_aborted_signal_raises_before_work() -> None:
    controller = AbortController()
    controller.abort()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    coro = work()
    with pytest.raises(AbortedError):
        await abortable(coro, controller.signal)
    coro.close()
    assert not ran


async def test_abort_after_completion_does_not_cancel_the_caller() -> None:
    controller = AbortController()

    async def quick() -> int:
        return 7

    assert await abortable(quick(), controller.signal) == 7
    controller.abort()
    # The task goes on: a late abort must not cancel unrelated awaits.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert asyncio.current_task() is not None and not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_outside_cancellation_is_not_turned_into_abort() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(abortable(forever(), controller.signal))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_signal_wait_returns_on_abort() -> None:
    controller = AbortController()
    waiter = asyncio.create_task(controller.signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    controller.abort()
    await asyncio.wait_for(waiter, 5)
