"""The response cache in single runs, over real HTTP to the simulator: a hit replays the
reply (a stream with the same events and result), concurrent identical requests are sent
once, errors, refusals and cut-off replies are never stored, entries expire, a failing
store never fails a run, and the options (agent, call, batch, CLI) reach the trip."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cache_support import (
    PROVIDERS,
    WEATHER,
    answer,
    event_shape,
    get_weather,
    make_model,
    trips,
)
from store_clock import StepClock

import raygent
from raygent import ResponseCache
from raygent.cache import request_key
from raygent.errors import InvalidOptionsError
from raygent.models.contract import ModelOptions
from raygent.sim import Fault, Latency, Match, Reply, Rule, serve
from raygent.stores import RedisStore
from raygent.testing import ScriptedModel, reply

ROOT = Path(__file__).resolve().parents[2]  # `python -m raygent` imports tests.cache...


def _shapes(events: list[Any]) -> list[tuple[Any, ...]]:
    return [event_shape(e) for e in events]


async def drain(stream: Any) -> tuple[list[Any], Any]:
    events = [event async for event in stream]
    return events, await stream.result


@pytest.mark.kinds("memory", "sqlite")
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_hit_answers_as_the_request_did_with_no_http(
    backend_kind: str, cache_kind: str, make_cache: Any, provider: str
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model(provider, sim), tools=[get_weather], cache=cache)
        paid = await bot.execute("What is the weather?")
        sent = sim.stats().requests
        hit = await bot.execute("What is the weather?")
        assert sim.stats().requests == sent == 2
    assert paid.ok and hit.ok
    assert trips(paid) == ["miss", "miss"] and trips(hit) == ["hit", "hit"]
    assert answer(hit) == answer(paid)
    # The report: cost 0, the tokens the reply cost when paid, and what it saved.
    assert hit.usage.cost is not None and hit.usage.cost.total == 0
    assert paid.usage.cost is not None and paid.usage.cost.total > 0
    assert hit.report.saved == pytest.approx(paid.usage.cost.total)
    assert paid.report.saved == 0 and hit.report.cache_hits == 2
    assert all(t.saved > 0 for t in hit.report.trips)
    # The report's JSON keeps them (and leaves them out without a cache).
    trip = json.loads(hit.report.to_json())["trips"][0]
    assert trip["cache"] == "hit" and trip["saved"] > 0


@pytest.mark.kinds("sqlite", "redis")
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_from_the_cache_gives_the_same_events_and_result(
    backend_kind: str, cache_kind: str, make_cache: Any, provider: str
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model(provider, sim), tools=[get_weather], cache=cache)
        net_events, net = await drain(bot.stream("What is the weather?"))
        sent = sim.stats().requests
        hit_events, hit = await drain(bot.stream("What is the weather?"))
        assert sim.stats().requests == sent == 2
    assert trips(net) == ["miss", "miss"] and trips(hit) == ["hit", "hit"]
    # The trips' events in order; all events alike (tools may end in any order on Ray).
    hit_shapes, net_shapes = map(_shapes, (hit_events, net_events))
    assert [e for e in hit_shapes if e[0].startswith("agent.trip")] == [
        e for e in net_shapes if e[0].startswith("agent.trip")
    ]
    assert sorted(map(repr, hit_shapes)) == sorted(map(repr, net_shapes))
    assert answer(hit) == answer(net)
    streamed = [e for e in hit_events if e.type == "agent.trip.streaming"]
    assert len(streamed) > 2  # the recorded deltas, not one block per trip


@pytest.mark.kinds("memory")
async def test_a_stream_answered_from_a_reply_that_came_whole(
    cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim), tools=[get_weather], cache=cache)
        whole = await bot.execute("What is the weather?")
        events, streamed = await drain(bot.stream("What is the weather?"))
        assert sim.stats().requests == 2  # the stream was answered by the cache
    assert trips(streamed) == ["hit", "hit"]
    assert answer(streamed) == answer(whole)
    text = "".join(e.text for e in events if e.type == "agent.trip.streaming")
    assert text == "Let me check.Sunny in Paris and Oslo."
    calls = {e.call_id for e in events if e.type == "agent.tool.streaming"}
    assert calls == {c.call_id for c in whole.report.tool_calls}


@pytest.mark.kinds("memory", "redis")
@pytest.mark.parametrize("streaming", [False, True], ids=["execute", "stream"])
async def test_64_identical_concurrent_requests_send_one(
    backend_kind: str, cache_kind: str, make_cache: Any, streaming: bool
) -> None:
    cache = make_cache()
    async with serve([Rule(reply=Reply(text="one answer"))], latency=Latency(fixed_ms=300)) as sim:
        bot = raygent.agent(model=make_model("openai", sim), cache=cache)

        async def one() -> Any:
            if streaming:
                return (await drain(bot.stream("the same question")))[1]
            return await bot.execute("the same question")

        results = await asyncio.gather(*(one() for _ in range(64)))
        stats = sim.stats()
    assert stats.requests == 1
    assert all(r.ok and r.text == "one answer" for r in results)
    assert sorted(trips(r)[0] or "" for r in results) == ["hit"] * 63 + ["miss"]


@pytest.mark.kinds("memory")
@pytest.mark.parametrize("streaming", [False, True], ids=["execute", "stream"])
async def test_concurrent_requests_whose_reply_is_not_stored_each_send_at_once(
    cache_kind: str, make_cache: Any, streaming: bool
) -> None:
    cache = make_cache()
    async with serve(WEATHER, latency=Latency(fixed_ms=200)) as sim:
        bot = raygent.agent(model=make_model("openai", sim), cache=cache)

        async def one(question: str) -> Any:
            if streaming:
                return (await drain(bot.stream(question)))[1]
            return await bot.execute(question)

        results = await asyncio.wait_for(
            asyncio.gather(*(one(q) for q in ["refuse"] * 8 + ["cut"] * 8)), 30
        )
        stats = sim.stats()
    assert not any(r.ok for r in results)
    assert stats.requests == 16  # the followers sent their own, none was answered twice
    assert stats.peak_in_flight >= 8  # ...together after the first, not one after another


@pytest.mark.kinds("memory", "sqlite", "redis", "postgres")
async def test_errors_refusals_and_cut_off_replies_are_never_stored(
    cache_kind: str, make_cache: Any
) -> None:
    script = [
        Rule(match=Match(last_user="fail"), reply=Reply(fault=Fault(kind="status", status=400))),
        *WEATHER,
    ]
    cache = make_cache()
    async with serve(script) as sim:
        bot = raygent.agent(model=make_model("openai", sim), cache=cache)
        for question in ("fail", "refuse", "cut"):
            before = sim.stats().requests
            first = await bot.execute(question)
            second = await bot.execute(question)
            assert sim.stats().requests - before == 2, question  # both were sent
            assert not first.ok and not second.ok, question
            # A failed trip has no reply to mark; a refused or cut-off one was a miss.
            assert "hit" not in [t.cache for t in second.report.trips], question


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_an_entry_expires_after_its_ttl_on_the_store_clock(
    cache_kind: str, make_cache: Any
) -> None:
    clock = StepClock()
    cache = make_cache({"clock": clock}, ttl=60)
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim), cache=cache)
        assert trips(await bot.execute("hello")) == ["miss"]
        clock.advance(59)
        assert trips(await bot.execute("hello")) == ["hit"]
        clock.advance(2)
        assert trips(await bot.execute("hello")) == ["miss"]
        assert sim.stats().requests == 2


@pytest.mark.kinds("redis")
async def test_an_entry_expires_after_its_ttl_on_redis(cache_kind: str, make_cache: Any) -> None:
    cache = make_cache(ttl=0.3)
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim), cache=cache)
        assert trips(await bot.execute("hello")) == ["miss"]
        # Redis expires on its own clock: wait (bounded) until a run is sent again.
        deadline = time.monotonic() + 10
        while trips(await bot.execute("hello")) == ["hit"]:
            assert time.monotonic() < deadline, "the entry never expired"
            await asyncio.sleep(0.05)
        assert sim.stats().requests >= 2


async def test_a_store_that_fails_never_fails_a_run() -> None:
    dead = RedisStore("redis://127.0.0.1:1/0", pool_timeout=1)
    cache = ResponseCache(dead)
    try:
        async with serve(WEATHER) as sim:
            bot = raygent.agent(model=make_model("openai", sim), cache=cache)
            results = [await bot.execute("hello") for _ in range(2)]
            assert sim.stats().requests == 2
    finally:
        await dead.aclose()
    assert all(r.ok and trips(r) == ["unavailable"] for r in results)


async def test_models_that_do_not_say_what_they_send_are_not_cached() -> None:
    model = ScriptedModel([reply("a"), reply("b")])
    bot = raygent.agent(model=model, cache=ResponseCache())
    first, second = await bot.execute("hi"), await bot.execute("hi")
    assert (first.text, second.text) == ("a", "b")
    assert trips(first) == trips(second) == [None]


async def test_the_cache_is_given_per_agent_and_per_call() -> None:
    cache = ResponseCache()
    async with serve(WEATHER) as sim:
        plain = raygent.agent(model=make_model("openai", sim))
        cached = raygent.agent(model=make_model("openai", sim), cache=cache)
        assert trips(await plain.execute("hello")) == [None]
        assert trips(await plain.execute("hello", cache=cache)) == ["miss"]
        assert trips(await cached.execute("hello")) == ["hit"]
        assert trips(await cached.execute("hello", cache=None)) == [None]  # off for a call
        assert sim.stats().requests == 3
    with pytest.raises(TypeError, match="ResponseCache"):
        raygent.agent(model=make_model("openai", sim), cache="yes")  # type: ignore[arg-type]


async def test_namespaces_keep_entries_apart_and_copies_share_them() -> None:
    cache = ResponseCache()
    other = ResponseCache(namespace="other")
    copy = pickle.loads(pickle.dumps(cache))  # a copy in this process: the same memory
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim))
        assert trips(await bot.execute("hello", cache=cache)) == ["miss"]
        assert trips(await bot.execute("hello", cache=copy)) == ["hit"]
        assert trips(await bot.execute("hello", cache=other)) == ["miss"]
        assert trips(await bot.execute("hello", cache=ResponseCache())) == ["miss"]


async def test_the_key_covers_the_body_less_the_stream_fields() -> None:
    async with serve(WEATHER) as sim:
        model = make_model("openai", sim)
        base = request_key(model, [raygent.UserMessage(content="hi")], ModelOptions())
        same = request_key(model, [raygent.UserMessage(content="hi")], ModelOptions())
        warmer = request_key(
            model, [raygent.UserMessage(content="hi")], ModelOptions(temperature=0.5)
        )
        other_text = request_key(model, [raygent.UserMessage(content="ho")], ModelOptions())
        other_model = request_key(
            make_model("openai", sim, api_key="sk-another-key-00"),
            [raygent.UserMessage(content="hi")],
            ModelOptions(),
        )
        other_wire = request_key(
            make_model("openai_responses", sim), [raygent.UserMessage(content="hi")], ModelOptions()
        )
    assert base == same == other_model  # the API key does not change the answer
    assert len({base, warmer, other_text, other_wire}) == 4
    assert request_key(ScriptedModel([]), [], ModelOptions()) is None


async def test_the_cli_runs_a_batch_twice_and_pays_once(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"input": f"q {n}"}) + "\n" for n in range(20)))
    async with serve([Rule(reply=Reply(text="an answer"))]) as sim:
        env = {**os.environ, "RAYGENT_CACHE_TEST_SIM": sim.openai_base_url}
        for run in range(2):
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "raygent", "batch", "tests.cache.cli_target:bot"),
                *(str(source), "-o", str(tmp_path / f"out{run}.jsonl"), "--backend", "local"),
                *("--cache", str(tmp_path / "cache.db"), "--no-progress"),
                cwd=ROOT,
                env=env,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode == 0, err.decode()
            assert ("cache: 20 trips answered" in err.decode()) == (run == 1), err.decode()
        assert sim.stats().requests == 20


@pytest.mark.parametrize(
    "typo", ["redis//127.0.0.1", "redis:/127.0.0.1", "reddis://127.0.0.1", "REDIS://host"]
)
def test_a_cache_named_by_a_malformed_url_is_refused(
    typo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be created here
    with pytest.raises(InvalidOptionsError, match="looks like a URL"):
        ResponseCache.at(typo)
    assert list(tmp_path.iterdir()) == []
    assert repr(ResponseCache.at(str(tmp_path / "cache.db"))).startswith("ResponseCache(SQLite")


async def test_the_cli_refuses_a_cache_typo_and_a_dead_store(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"input": f"q {n}"}) + "\n" for n in range(6)))
    async with serve([Rule(reply=Reply(text="an answer"))]) as sim:
        env = {**os.environ, "RAYGENT_CACHE_TEST_SIM": sim.openai_base_url}
        errs = []
        for where in ("redis//127.0.0.1", "redis://127.0.0.1:1/0"):
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "raygent", "batch", "tests.cache.cli_target:bot"),
                *(str(source), "-o", str(tmp_path / "out.jsonl"), "--backend", "local"),
                *("--cache", where, "--no-progress"),
                cwd=ROOT,
                env=env,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(proc.communicate(), 120)
            errs.append((proc.returncode, err.decode()))
        requests = sim.stats().requests
    (typo_code, typo_err), (dead_code, dead_err) = errs
    assert typo_code == 2 and typo_err.count("\n") == 1, typo_err
    assert "raygent batch: cache store 'redis//127.0.0.1' looks like a URL" in typo_err
    assert not (ROOT / "redis//127.0.0.1").exists()
    # A store the job cannot reach when it starts refuses it (the job's check): nothing
    # is paid as a miss. (Counted once when it dies mid-job: test_cache_batch.py.)
    assert dead_code == 2, dead_err
    assert "the response cache (RedisStore): a round trip failed" in dead_err
    assert requests == 0
