"""Jobs with a deadline, on both backends, against the simulator over HTTP: the way each
item goes, what moves when a batch is late or the deadline near, what it costs against
all online, the sink written once, a second run of the same job, and what is learnt."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from route_support import (
    ITEMS,
    TUNED,
    history,
    model_on,
    online_requests,
    routed,
    simulator,
    sink_keys,
    tiers_asked,
)

import raygent
from raygent._batch.routing.learn import timings_key
from raygent.errors import DeadlineError
from raygent.sim import BatchTimes, Fault, Match, Reply, Rule, ServiceTiers, ToolCallReply
from raygent.stores import SQLiteStore

QUESTIONS = [f"question {i}" for i in range(ITEMS)]


async def test_a_deadline_a_batch_meets_goes_by_batch_at_half_price(
    backend_kind: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    async with simulator(BatchTimes(median_seconds=0.5, spread=0.2, seed=1)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        bot = raygent.agent(model=model)
        options = dict(
            deadline=timedelta(seconds=30),
            route=raygent.Route(store=store),
            provider_batch=TUNED,
            sink=sink,
            progress=False,
        )
        result = await raygent.batch(bot, QUESTIONS, **options)
        first = sim.stats()
        again = await raygent.batch(bot, QUESTIONS, resume=True, **options)
        second = sim.stats()
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS
    assert route.planned == {"batch": ITEMS} and route.items == {"batch": ITEMS}
    assert route.met and route.moved == {} and route.paid_twice == 0
    assert route.cost is not None and route.online_cost
    assert route.cost <= 0.52 * route.online_cost
    assert online_requests(first) == 0 and first.batch_lines == ITEMS
    assert sorted(sink_keys(sink)) == list(range(ITEMS))  # every item once
    # The second run of the job finds it done: nothing sent, the sink as it was.
    assert again.report.skipped == ITEMS and again.report.total == 0
    assert second.requests == first.requests
    assert sorted(sink_keys(sink)) == list(range(ITEMS))
    # What the job saw of its batch is in the store, for the next job to plan from.
    seen = await store.timings(timings_key(model))
    assert len(seen) > 50 and seen[0].way == "batch" and seen[0].ok


async def test_a_stalled_batch_is_cancelled_and_its_items_answered_online_in_time(
    backend_kind: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    stall = BatchTimes(median_seconds=0.5, stall_rate=1.0)
    async with simulator(stall) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)  # batches usually come back at once
        result = await routed(raygent.agent(model=model), QUESTIONS, 12, store, sink=sink)
        stats = sim.stats()
        asked = tiers_asked(sim)
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS
    assert route.planned == {"batch": ITEMS} and route.met
    assert route.moved == {"late batch": ITEMS}
    assert route.items == {"flex": ITEMS} and asked == ["flex"] * ITEMS  # the rescue way
    summary = result.report.provider_batch
    assert summary is not None and [b.status for b in summary.batches] == ["cancelled"]
    assert stats.batch_lines == 0 and route.paid_twice <= 0.02 * ITEMS
    assert route.cost is not None and route.online_cost
    assert route.cost < route.online_cost  # flex: below all-online even when rescued
    assert sorted(sink_keys(sink)) == list(range(ITEMS))
    late = [s for s in await store.timings(timings_key(model)) if s.way == "batch"]
    assert not late[0].ok  # the stall is learnt


async def test_a_deadline_too_tight_for_batch_goes_online_from_the_start(
    backend_kind: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    async with simulator(BatchTimes(median_seconds=2.0)) as sim:
        model = model_on(sim)
        store = await history(model, batch=2.0)
        result = await routed(raygent.agent(model=model), QUESTIONS, 2.5, store, sink=sink)
        stats = sim.stats()
        asked = tiers_asked(sim)
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS and route.met
    assert "batch" not in route.planned and stats.batch_calls == 0
    assert set(route.items) <= {"flex", "standard", "priority"}
    assert set(asked) <= {"flex", "default", "priority"} and len(asked) == ITEMS
    assert route.moved == {} and sorted(sink_keys(sink)) == list(range(ITEMS))


TOOL_ROUND = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


async def test_a_trip_back_from_a_batch_takes_its_next_trip_by_the_way_that_fits(
    backend_kind: str,
) -> None:
    # History says batches take half a second; these take five: the first trips come
    # back, and the second ones, the deadline near, are answered online (their batch
    # cancelled at its cutoff, or not sent at all).
    async with simulator(BatchTimes(median_seconds=5.0), script=TOOL_ROUND) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.5)
        result = await routed(raygent.agent(model=model, tools=[lookup]), QUESTIONS, 10, store)
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS and route.met
    assert route.planned == {"batch": ITEMS}
    seconds = [item.result.report.trips for item in result.items]
    assert all(first.via == "batch" for first, _ in seconds)
    online = sum(second.via == "online" for _, second in seconds)
    # The second trips' batch, late, was cancelled: what it had answered is kept (not
    # paid twice), the rest went online.
    assert 0 < online == sum(route.moved.values()) and route.paid_twice == 0
    assert route.trips == {"batch": 2 * ITEMS - online, "flex": online}
    summary = result.report.provider_batch
    assert summary is not None and [b.status for b in summary.batches][-1] == "cancelled"


async def test_a_budget_or_a_deadline_that_cannot_be_met_is_refused_before_anything(
    backend_kind: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    async with simulator(BatchTimes(median_seconds=0.5)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        bot = raygent.agent(model=model)
        common = dict(route=raygent.Route(store=store), sink=sink, progress=False)
        with pytest.raises(DeadlineError) as budget:
            await raygent.batch(
                bot,
                QUESTIONS,
                deadline=timedelta(seconds=30),
                budget=raygent.Budget(usd=1e-7),
                **common,
            )
        with pytest.raises(DeadlineError) as deadline:
            await raygent.batch(bot, QUESTIONS, deadline=timedelta(seconds=0.2), **common)
        stats = sim.stats()
    assert budget.value.details["constraint"] == "budget"
    assert budget.value.details["least_budget"] > 1e-7
    assert deadline.value.details["constraint"] == "deadline"
    assert deadline.value.details["earliest"] is not None
    assert stats.requests == 0 and not sink.exists()  # nothing sent, nothing written


async def test_with_a_budget_that_fits_the_job_holds_to_both(backend_kind: str) -> None:
    async with simulator(BatchTimes(median_seconds=0.5)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        result = await routed(
            raygent.agent(model=model), QUESTIONS, 30, store, budget=raygent.Budget(usd=1.0)
        )
    route, budget = result.report.route, result.report.budget
    assert route is not None and route.met and route.items == {"batch": ITEMS}
    assert budget is not None and budget.spent.usd <= 1.0
    assert route.cost == pytest.approx(budget.spent.usd)


async def test_a_cached_job_run_again_sends_nothing(backend_kind: str, tmp_path: Path) -> None:
    cache = raygent.ResponseCache(store=SQLiteStore(tmp_path / "cache.db"))
    async with simulator(BatchTimes(median_seconds=0.5)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        options = dict(
            deadline=timedelta(seconds=30),
            route=raygent.Route(store=store),
            provider_batch=TUNED,
            cache=cache,
            progress=False,
        )
        first = await raygent.batch(raygent.agent(model=model), QUESTIONS, **options)
        sent = sim.stats()
        second = await raygent.batch(raygent.agent(model=model), QUESTIONS, **options)
        after = sim.stats()
    assert first.report.route is not None and first.report.route.items == {"batch": ITEMS}
    assert after.requests == sent.requests  # every reply from the cache
    assert second.report.cache_hits == ITEMS and second.report.succeeded == ITEMS
    assert second.report.route is not None and second.report.route.met


async def test_sessions_keep_their_turns_whatever_way_their_items_go(
    backend_kind: str, tmp_path: Path
) -> None:
    memory = raygent.Memory(store=SQLiteStore(tmp_path / "sessions.db"))
    async with simulator(BatchTimes(median_seconds=0.5, stall_rate=1.0)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        bot = raygent.agent(model=model, memory=memory)
        items = [{"input": f"turn {i}", "session_id": f"s{i % 4}", "key": i} for i in range(12)]
        result = await routed(bot, items, 12, store)
        sessions = [await bot.session(f"s{n}").history() for n in range(4)]
    route = result.report.route
    assert result.report.succeeded == 12 and route is not None and route.met
    for messages in sessions:
        roles = [m.role for m in messages]
        assert roles == ["user", "assistant"] * 3  # each turn once, in order


async def test_a_late_batch_slow_to_cancel_pays_twice_for_what_it_answers_after(
    backend_kind: str, tmp_path: Path
) -> None:
    # Batches take 10 s (a line every 0.25 s), the route expects half a second: the
    # batch is late at its cutoff and cancelled, but goes on answering for 0.6 s more,
    # past the grace it is given (0.2 s): its lines go online, and what it answers of
    # them after that was paid twice, counted and priced.
    sink = tmp_path / "out.jsonl"
    slow = BatchTimes(median_seconds=10.0, cancel_seconds=0.6)
    async with simulator(slow) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.5)
        result = await routed(raygent.agent(model=model), QUESTIONS, 9, store, sink=sink)
        stats = sim.stats()
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS and route.met
    assert route.items == {"flex": ITEMS} and route.moved == {"late batch": ITEMS}
    # Every line the batch answered was answered online too.
    assert route.paid_twice == stats.batch_lines > 0
    assert route.paid_twice_cost is not None and route.paid_twice_cost > 0
    online = route.online_cost or 0.0
    assert route.cost == pytest.approx(0.5 * online + route.paid_twice_cost, rel=0.05)
    assert sorted(sink_keys(sink)) == list(range(ITEMS))  # answered once, written once


async def test_an_estimate_shows_the_plan_and_the_job_plans_from_its_sample(
    backend_kind: str,
) -> None:
    async with simulator(BatchTimes(median_seconds=0.5)) as sim:
        model = model_on(sim)
        store = await history(model, batch=0.8)
        bot = raygent.agent(model=model)
        route = raygent.Route(store=store)
        due = timedelta(seconds=30)
        guess = await raygent.estimate(
            bot, QUESTIONS, sample=10, deadline=due, route=route, provider_batch=TUNED
        )
        refused = await raygent.estimate(
            bot, QUESTIONS, sample=10, deadline=due, route=route, budget=raygent.Budget(usd=1e-9)
        )
        result = await raygent.batch(
            bot, QUESTIONS, deadline=due, route=route, provider_batch=TUNED, reuse=guess,
            progress=False,
        )  # fmt: skip
    planned = guess.route
    assert planned is not None and planned.items == {"batch": ITEMS}
    assert planned.cost is not None and planned.online_cost
    assert planned.cost / planned.online_cost == pytest.approx(0.5, abs=0.02)
    assert planned.finish is not None and planned.finish_high is not None
    assert 0 < planned.finish <= planned.finish_high < 30
    assert "by the deadline: 40 batch" in str(guess)
    assert guess.demand is not None and guess.demand.trips == 1.0
    assert refused.route is not None and refused.route.refused is not None
    assert "budget" in refused.route.refused
    # The sample's ten answers are recorded as the job's; the other thirty go by batch.
    route_summary = result.report.route
    assert route_summary is not None and route_summary.items == {"batch": ITEMS - 10}
    assert result.report.succeeded == ITEMS


FALLBACK = [
    Rule(match=Match(api="anthropic"), reply=Reply(fault=Fault(kind="status", status=529))),
    Rule(reply=Reply(text="from openai")),
]


async def test_a_fallback_model_is_routed_by_its_first_model_and_falls_back(
    backend_kind: str,
) -> None:
    async with simulator(BatchTimes(median_seconds=0.5), script=FALLBACK) as sim:
        first = raygent.AnthropicModel(
            "claude-sonnet-4-5", base_url=sim.anthropic_base_url, api_key="sk-test",
            pricing=raygent.Pricing(input_per_mtok=3.0, output_per_mtok=15.0),
        )  # fmt: skip
        store = await history(first, batch=0.8)
        bot = raygent.agent(model=raygent.fallback_model([first, model_on(sim)]))
        result = await routed(bot, QUESTIONS, 30, store)
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS and route.met
    assert route.planned == {"batch": ITEMS}  # Anthropic's ways: its batch API, standard
    assert all(item.data == "from openai" for item in result.items)
    for item in result.items:
        (trip,) = item.result.report.trips
        assert trip.via == "batch" and [a["provider"] for a in trip.attempts] == ["anthropic"]


def test_the_cli_deadline_reads_spans_and_datetimes() -> None:
    from raygent._batch.routing.options import deadline_text

    assert deadline_text("6h") == timedelta(hours=6)
    assert deadline_text("1h30m") == timedelta(minutes=90)
    assert deadline_text("45s") == timedelta(seconds=45)
    assert deadline_text("2d") == timedelta(days=2)
    assert deadline_text("2026-01-31T18:00").hour == 18  # type: ignore[union-attr]
    for bad in ("6 hours", "soon", "h6", ""):
        with pytest.raises(ValueError, match="--deadline"):
            deadline_text(bad)


async def test_flex_refused_for_capacity_goes_to_standard_and_is_learnt(
    backend_kind: str,
) -> None:
    tiers = ServiceTiers(flex_latency=2.0, flex_refusal_rate=0.3, seed=3)
    async with simulator(BatchTimes(median_seconds=2.0), tiers=tiers) as sim:
        model = model_on(sim)
        store = await history(model, batch=2.0)
        result = await routed(raygent.agent(model=model), QUESTIONS, 4, store)
        asked = tiers_asked(sim)
    route = result.report.route
    assert route is not None and result.report.succeeded == ITEMS and route.met
    assert route.planned == {"flex": ITEMS}
    refused = asked.count("default")  # each refusal sent again at standard
    assert 0 < refused == route.flex_refused and asked.count("flex") == ITEMS
    assert route.trips == {"flex": ITEMS - refused, "standard": refused}
    assert result.report.tier_fallbacks == refused
    seen = await store.timings(timings_key(model))
    assert sum(1 for s in seen if s.way == "flex" and not s.ok) == refused
