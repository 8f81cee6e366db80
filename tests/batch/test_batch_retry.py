"""Per-item retries: which errors, how long between, usage across attempts."""

from __future__ import annotations

from typing import Any

import pytest
from batch_support import Sleeps, fast_retry

import raygent
from raygent import Usage
from raygent._batch import Retry, batch
from raygent.errors import (
    AgentIncompleteError,
    AuthenticationError,
    ContentFilterError,
    InvalidRequestError,
    RateLimitError,
    ServerError,
)
from raygent.testing import FunctionModel, ScriptedModel, call, reply


def failing_first(k: int, error: Exception) -> FunctionModel:
    """A model that fails the first `k` requests of each input, then answers."""
    seen: dict[str, int] = {}

    def step(messages: Any, options: Any) -> Any:
        text = messages[-1].text
        seen[text] = seen.get(text, 0) + 1
        return error if seen[text] <= k else f"ok {text}"

    return FunctionModel(step)


async def test_each_item_is_retried_until_it_succeeds() -> None:
    sleeps = Sleeps()
    agent = raygent.agent(model=failing_first(2, ServerError("overloaded")))
    result = await batch(agent, ["a", "b", "c"], retry=fast_retry(sleeps, attempts=3))
    assert result.ok and result.data == ["ok a", "ok b", "ok c"]
    assert [item.attempts for item in result.items] == [3, 3, 3]
    assert result.report.attempts == 9 and result.report.retries == 6
    assert sorted(sleeps.delays) == [1.0] * 3 + [2.0] * 3  # exponential from 1 s


async def test_an_item_fails_when_its_attempts_run_out() -> None:
    agent = raygent.agent(model=failing_first(5, RateLimitError("busy")))
    result = await batch(agent, ["a"], retry=fast_retry(attempts=2))
    item = result.items[0]
    assert item.status == "failed" and item.attempts == 2
    assert isinstance(item.error, RateLimitError) and result.data == [None]
    assert result.report.errors == {"PROVIDER_RATE_LIMITED": 1}


@pytest.mark.parametrize("error", [AuthenticationError("bad key"), InvalidRequestError("bad")])
async def test_errors_that_are_not_retryable_are_not_retried(error: Exception) -> None:
    sleeps = Sleeps()
    agent = raygent.agent(model=failing_first(1, error))
    result = await batch(agent, ["a"], retry=fast_retry(sleeps, attempts=5))
    assert result.items[0].status == "failed" and result.items[0].attempts == 1
    assert sleeps.delays == []


async def test_an_incomplete_run_is_a_failed_item_counted_by_code_and_not_retried() -> None:
    """A cut-off reply comes back cut off again: the item fails once, its code counted."""
    sleeps = Sleeps()
    agent = raygent.agent(model=ScriptedModel([reply("The story beg", finish="length")] * 3))
    result = await batch(agent, ["story"], retry=fast_retry(sleeps, attempts=3))
    item = result.items[0]
    assert item.status == "failed" and item.attempts == 1 and sleeps.delays == []
    assert isinstance(item.error, AgentIncompleteError) and item.error.category == "incomplete"
    assert result.report.errors == {"AGENT_INCOMPLETE": 1} and result.report.failed == 1


async def test_retry_on_decides_which_errors_are_retried() -> None:
    agent = raygent.agent(model=failing_first(1, ContentFilterError("flagged once")))
    by_type = await batch(agent, ["a"], retry=fast_retry(retry_on=ContentFilterError))
    assert by_type.ok and by_type.items[0].attempts == 2

    agent = raygent.agent(model=failing_first(1, ContentFilterError("flagged once")))
    by_rule = await batch(
        agent,
        ["a"],
        retry=fast_retry(retry_on=lambda e: getattr(e, "retryable", False) or "once" in str(e)),
    )
    assert by_rule.ok

    # An error of the job's configuration is never retried, whatever the rule says.
    agent = raygent.agent(model=failing_first(1, AuthenticationError("rotating key")))
    refused = await batch(agent, ["a"], retry=fast_retry(retry_on=AuthenticationError))
    assert refused.items[0].status == "failed" and refused.items[0].attempts == 1

    # retry_on replaces the default rule: a rate limit is not in this list.
    agent = raygent.agent(model=failing_first(1, RateLimitError("busy")))
    narrowed = await batch(agent, ["a"], retry=fast_retry(retry_on=(AuthenticationError,)))
    assert narrowed.items[0].status == "failed"


async def test_retry_after_is_honoured_as_the_least_delay() -> None:
    sleeps = Sleeps()
    agent = raygent.agent(model=failing_first(2, RateLimitError("busy", retry_after=7.5)))
    result = await batch(agent, ["a"], retry=fast_retry(sleeps, attempts=3, max_delay=2.0))
    assert result.ok
    assert sleeps.delays == [7.5, 7.5]  # above max_delay: the provider's word wins


async def test_usage_counts_every_attempt_failed_ones_included() -> None:
    @raygent.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    paid = Usage(requests=1, input_tokens=10, output_tokens=3)
    final = Usage(requests=1, input_tokens=20, output_tokens=1)
    model = ScriptedModel(
        [
            reply(tool_calls=[call("add", {"a": 1, "b": 2})], usage=paid),  # attempt 1, trip 1
            RateLimitError("busy"),  # attempt 1, trip 2: the run fails, retryably
            reply("3", usage=final),  # attempt 2
        ]
    )
    agent = raygent.agent(model=model, tools=[add])
    result = await batch(agent, ["1+2?"], concurrency=1, retry=fast_retry())
    item = result.items[0]
    assert item.ok and item.attempts == 2
    assert item.result.usage == final  # the last run alone
    assert item.usage == paid + final  # the item: both attempts
    assert result.usage == paid + final


def test_backoff_kinds_caps_and_jitter() -> None:
    error = ServerError("x")
    assert [Retry(backoff="none").delay(n, error) for n in (1, 2)] == [0.0, 0.0]
    linear = Retry(backoff="linear", base_delay=0.5, jitter=False)
    assert [linear.delay(n, error) for n in (1, 2, 3)] == [0.5, 1.0, 1.5]
    exponential = Retry(backoff="exponential", max_delay=5, jitter=False)
    assert [exponential.delay(n, error) for n in (1, 2, 3, 4, 40)] == [1, 2, 4, 5, 5]
    custom = Retry(backoff=lambda n: 10.0 * n, max_delay=25, jitter=False)
    assert [custom.delay(n, error) for n in (1, 2, 3)] == [10, 20, 25]
    jittered = [Retry(max_delay=30).delay(3, error) for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in jittered) and len(set(jittered)) > 1
    assert Retry(jitter=False).delay(1, RateLimitError("x", retry_after=0.2)) == 1.0


def test_retry_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Retry(attempts=0)
    with pytest.raises(ValueError):
        Retry(backoff="fibonacci")  # type: ignore[arg-type]
