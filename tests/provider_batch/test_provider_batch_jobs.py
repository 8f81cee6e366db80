"""`raygent.batch(..., provider_batch=...)`: whole agent runs through the providers'
batch APIs on the simulator, on both backends (issue #29)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pb_support import APIS, FAST, QUICK, TOOL_ROUND, lookup, model_for, online_requests
from pydantic import BaseModel

import raygent
from raygent import ProviderBatch, Repair
from raygent.errors import InvalidOptionsError
from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.stores import Scope, SQLiteStore

ITEMS = 2000


@pytest.mark.timeout(300)
@pytest.mark.by_api_and_backend(
    # On Ray the three APIs take one path (the runners relay lines to the driver's
    # pool): one of them shows it at 2,000 items; the smaller tests run all three.
    [*(("local", api) for api in APIS), ("ray", "chat")]
)
async def test_a_2000_item_job_with_a_tool_round_goes_by_batch_at_half_the_price(
    api: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    items = [{"input": f"question {i}", "key": i} for i in range(ITEMS)]
    async with serve(TOOL_ROUND) as sim:
        bot = raygent.agent(model=model_for(api, sim), tools=[lookup])
        trips: dict[int, list[tuple[str, str | None]]] = {}
        costs: dict[int, float] = {}

        def seen(item: raygent.BatchItem) -> None:
            trips[item.key] = [(t.via, t.provider_batch) for t in item.result.report.trips]
            costs[item.key] = item.usage.cost.total

        result = await raygent.batch(
            bot, items, provider_batch=FAST, sink=sink, progress=False, on_item=seen
        )
        stats = sim.stats()
        online = await raygent.batch(bot, items[:20], progress=False)  # the price online
    report = result.report
    assert report.succeeded == ITEMS, (
        report.errors,
        [str(i.error) for i in result.items[:2]],
        report.provider_batch,
    )
    assert online_requests(stats) == 0  # nothing went online
    # Two trips an item, each one line, sent once.
    assert stats.batch_lines == 2 * ITEMS, (stats, report.provider_batch, report.retries)
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(ITEMS))  # every item once in the sink
    summary = report.provider_batch
    assert summary is not None and summary.lines == 2 * ITEMS
    ids = {b.id for b in summary.batches}
    assert all(b.status in ("completed", "ended") and b.ended for b in summary.batches)
    # Every trip's report names its batch; each item's two trips went in two batches.
    assert len(trips) == ITEMS
    for (via0, batch0), (via1, batch1) in trips.values():
        assert (via0, via1) == ("batch", "batch")
        assert batch0 in ids and batch1 in ids and batch0 != batch1
    # Half the price of the same runs online, item by item, and in the report.
    for item in online.items:
        assert costs[item.key] == pytest.approx(item.usage.cost.total / 2)
    assert summary.cost == pytest.approx(summary.online_cost / 2)
    assert result.usage.cost is not None
    assert result.usage.cost.total == pytest.approx(summary.cost)
    # The calls besides the lines: upload, create, polls and downloads, amortised.
    assert stats.batch_calls / ITEMS <= 0.01


@pytest.mark.parametrize("api", APIS)
async def test_line_errors_are_the_trips_typed_errors_and_follow_the_retry_policy(
    api: str,
) -> None:
    script = [
        Rule(match=Match(last_user="bad"), reply=Reply(fault=Fault(kind="status", status=400))),
        Rule(
            match=Match(last_user="flaky"),
            reply=Reply(fault=Fault(kind="status", status=500)),
            times=1,
        ),
        Rule(reply=Reply(text="fine")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=model_for(api, sim))
        result = await raygent.batch(
            bot,
            ["ok", "bad", "flaky"],
            provider_batch=QUICK,
            retry=raygent.Retry(attempts=3, base_delay=0.01, jitter=False),
            progress=False,
        )
        stats = sim.stats()
    ok, bad, flaky = result.items
    assert ok.status == "completed" and ok.data == "fine"
    assert bad.status == "failed" and bad.error.code == "PROVIDER_INVALID_REQUEST"
    assert bad.attempts == 1  # not retryable: tried once
    assert flaky.status == "completed" and flaky.attempts == 2  # a 500 line is retried
    assert online_requests(stats) == 0


@pytest.mark.parametrize("mode", ["retry", "online", "fail"])
@pytest.mark.parametrize("api", ["chat", "anthropic"])
async def test_expired_lines_follow_on_expired(api: str, mode: str) -> None:
    options = ProviderBatch(gather_seconds=0.5, poll_seconds=0.05, on_expired=mode)
    async with serve([Rule(reply=Reply(text="fine"))], batch_expire_after=4) as sim:
        bot = raygent.agent(model=model_for(api, sim))
        result = await raygent.batch(
            bot, [f"q{i}" for i in range(10)], provider_batch=options, progress=False
        )
        stats = sim.stats()
    statuses = [item.status for item in result.items]
    summary = result.report.provider_batch
    assert summary is not None
    if mode == "fail":
        assert statuses.count("completed") == 4
        failed = [item for item in result.items if item.status == "failed"]
        assert {item.error.code for item in failed} == {"PROVIDER_BATCH_EXPIRED"}
        assert all(item.attempts == 1 for item in failed)  # not retryable
        assert online_requests(stats) == 0
    elif mode == "online":
        assert statuses == ["completed"] * 10
        assert online_requests(stats) == 6 and summary.online_lines == 6
    else:  # resent in later batches until answered: 4 + 4 + 2
        assert statuses == ["completed"] * 10
        assert [b.lines for b in summary.batches] == [10, 6, 2]
        assert online_requests(stats) == 0


@pytest.mark.parametrize("api", APIS)
async def test_a_batch_refused_as_a_whole_fails_its_trips_naming_the_first_bad_line(
    api: str,
) -> None:
    async with serve([Rule(reply=Reply(text="fine"))]) as sim:
        bot = raygent.agent(model=_refused_model(api, sim))
        result = await raygent.batch(bot, ["a", "b"], provider_batch=FAST, progress=False)
        stats = sim.stats()
    errors = [item.error for item in result.items]
    assert all(item.status == "failed" for item in result.items)
    assert {e.code for e in errors} == {"PROVIDER_BATCH"}
    assert all(item.attempts == 1 for item in result.items)  # a refused file: not retried
    # The first bad line is named: line 1 of the file (OpenAI), requests.0 (Anthropic).
    assert ("requests.0" if api == "anthropic" else "line 1") in str(errors[0])
    assert stats.batch_lines == 0 and online_requests(stats) == 0


def _refused_model(api: str, sim: object) -> object:
    """A model whose batch file the provider refuses (its lines are malformed): ours,
    made to write what a provider refuses, as a broken client would."""
    from raygent.models.batch_api import AnthropicBatchAPI, OpenAIBatchAPI

    class WrongURL(OpenAIBatchAPI):
        def encode(self, custom_id: str, body: bytes) -> bytes:
            line = {"custom_id": custom_id, "method": "POST", "url": "/v1/x", "body": {}}
            return json.dumps(line).encode()

    class NoParams(AnthropicBatchAPI):
        def encode(self, custom_id: str, body: bytes) -> bytes:
            return json.dumps({"custom_id": custom_id, "params": "?"}).encode()

    model = model_for(api, sim)
    api_of = model.batch_api

    def batch_api() -> object:
        real = api_of()
        if api == "anthropic":
            return NoParams(model)
        return WrongURL(model, real.endpoint)

    model.batch_api = batch_api  # type: ignore[method-assign]
    return model


class City(BaseModel):
    name: str
    population: int


@pytest.mark.parametrize("api", APIS)
async def test_structured_output_with_repair_goes_by_batch(api: str) -> None:
    script = [
        Rule(
            match=Match(last_user="Reply again"),
            reply=Reply(json={"name": "Oslo", "population": 7}),
        ),
        Rule(match=Match(last_user="Oslo"), reply=Reply(json={"name": "Oslo"})),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=model_for(api, sim), output=City)
        result = await raygent.batch(
            bot,
            ["Oslo?"] * 3,
            provider_batch=QUICK,
            run_options={"repair": Repair(max_attempts=1)},
            progress=False,
        )
        stats = sim.stats()
    assert result.data == [City(name="Oslo", population=7)] * 3
    trips = result.items[0].result.report.trips
    assert [(t.purpose, t.via) for t in trips] == [("answer", "batch"), ("repair", "batch")]
    assert online_requests(stats) == 0 and stats.batch_lines == 6


@pytest.mark.parametrize("save", ["message", "turn", "run"])
async def test_sessions_under_each_save_policy_go_by_batch(save: str, tmp_path: Path) -> None:
    async with serve(TOOL_ROUND) as sim:
        store = SQLiteStore(str(tmp_path / "s.db"))
        memory = raygent.Memory(store, save)
        bot = raygent.agent(model=model_for("chat", sim), tools=[lookup], memory=memory)
        items = [
            {"input": f"s{s} q{i}", "session_id": f"s{s}", "key": f"{s}-{i}"}
            for s in range(3)
            for i in range(3)
        ]
        result = await raygent.batch(bot, items, provider_batch=QUICK, progress=False)
        stats = sim.stats()
        histories = {s: await store.load(Scope(f"s{s}")) for s in range(3)}
    assert result.report.succeeded == 9, result.report.errors
    assert online_requests(stats) == 0
    for s, history in histories.items():
        asked = [m.text for m in history if m.role == "user"]
        assert asked == [f"s{s} q{i}" for i in range(3)]  # in order, each once
        assert [m.text for m in history if m.role == "assistant" and m.text] == ["answered"] * 3


async def test_a_model_without_a_batch_api_is_refused_before_anything_is_sent() -> None:
    async with serve([Rule(reply=Reply(text="x"))]) as sim:
        bot = raygent.agent(
            model=raygent.OpenAIModel("m", base_url=sim.openai_base_url + "/x", api_key="k")
        )
        with pytest.raises(InvalidOptionsError, match="no batch API"):
            await raygent.batch(bot, ["a"], provider_batch=True, progress=False)
        with pytest.raises(InvalidOptionsError, match="needs an agent"):
            await raygent.batch(lambda x: x, ["a"], provider_batch=True, progress=False)
        assert sim.stats().requests == 0


async def test_interrupting_the_job_cancels_the_batches_that_are_out() -> None:
    controller = raygent.AbortController()
    async with serve([Rule(reply=Reply(text="x"))], batch_seconds=60) as sim:
        bot = raygent.agent(model=model_for("chat", sim))
        options = ProviderBatch(gather_seconds=0.2, poll_seconds=0.05)

        async def abort_once_out() -> None:
            await sim.wait_until(lambda s: s.batch_calls >= 2)  # uploaded and created
            controller.abort("Ctrl-C")

        import asyncio

        aborting = asyncio.ensure_future(abort_once_out())
        result = await raygent.batch(
            bot, ["a", "b"], provider_batch=options, signal=controller.signal, progress=False
        )
        await aborting
        summary = result.report.provider_batch
        assert summary is not None and len(summary.batches) == 1
        batch = await _openai_batch(sim, summary.batches[0].id)
    assert [item.status for item in result.items] == ["cancelled", "cancelled"]
    assert batch["status"] in ("cancelling", "cancelled")


async def _openai_batch(sim: object, batch_id: str) -> dict:
    import httpx

    async with httpx.AsyncClient() as client:
        reply = await client.get(
            f"{sim.openai_base_url}/batches/{batch_id}",  # type: ignore[attr-defined]
            headers={"authorization": "Bearer sk-test"},
        )
    return reply.json()


async def test_trips_that_cannot_wait_for_a_batch_go_online() -> None:
    async with serve(TOOL_ROUND) as sim:
        bot = raygent.agent(model=model_for("chat", sim), tools=[lookup])
        items = [
            {"input": "later", "key": "later"},
            {"input": "now", "key": "now", "deadline": 0},  # due at once: online
        ]
        result = await raygent.batch(bot, items, provider_batch=QUICK, progress=False)
        stats = sim.stats()
    later, now = result.items
    assert [t.via for t in later.result.report.trips] == ["batch", "batch"]
    assert [t.via for t in now.result.report.trips] == ["online", "online"]
    assert online_requests(stats) == 2 and stats.batch_lines == 2
    summary = result.report.provider_batch
    assert summary is not None and summary.online_lines == 2
    with pytest.raises(ValueError, match="provider_batch"):  # no route, nothing to tune
        await raygent.batch(bot, items, deadline=60, route=None, progress=False)


@pytest.mark.parametrize("fallback", ["batch", "online"])
async def test_a_fallback_goes_to_the_next_models_batch_api_or_online(fallback: str) -> None:
    script = [
        Rule(match=Match(api="anthropic"), reply=Reply(fault=Fault(kind="status", status=529))),
        Rule(reply=Reply(text="from openai")),
    ]
    async with serve(script) as sim:
        model = raygent.fallback_model([model_for("anthropic", sim), model_for("chat", sim)])
        options = QUICK.model_copy(update={"fallback": fallback})
        result = await raygent.batch(
            raygent.agent(model=model), ["q"], provider_batch=options, progress=False
        )
        stats = sim.stats()
    (item,) = result.items
    assert item.status == "completed" and item.data == "from openai"
    (trip,) = item.result.report.trips
    assert [a["provider"] for a in trip.attempts] == ["anthropic"]  # the line that failed
    if fallback == "batch":
        assert trip.via == "batch" and trip.provider_batch.startswith("batch_")  # OpenAI's
        assert online_requests(stats) == 0 and stats.batch_lines == 2
    else:
        assert trip.via == "online" and trip.provider_batch is None
        assert online_requests(stats) == 1 and stats.batch_lines == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_reply_cut_at_its_output_limit_is_continued_by_batch(api: str) -> None:
    script = [
        Rule(match=Match(last_user="story"), reply=Reply(text="Once upon", finish="length")),
        Rule(reply=Reply(text=" a time.")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=model_for(api, sim), continue_on_output_limit=1)
        result = await raygent.batch(bot, ["story"], provider_batch=QUICK, progress=False)
        stats = sim.stats()
    (item,) = result.items
    assert item.status == "completed" and item.data == "Once upon a time."
    trips = item.result.report.trips
    assert [(t.purpose, t.via) for t in trips] == [("answer", "batch"), ("continuation", "batch")]
    assert online_requests(stats) == 0 and stats.batch_lines == 2


@pytest.mark.local_only("handlers in this process see the runs' events (on Ray, the runner's)")
async def test_a_runs_events_fire_as_online() -> None:
    seen: list[tuple[str, str]] = []

    def note(event: object) -> None:
        seen.append((getattr(event, "type", ""), str(getattr(event, "run_id", ""))))

    names = ["agent.trip.started", "agent.trip.completed", "agent.tool.called", "agent.completed"]
    async with serve(TOOL_ROUND) as sim:
        bot = raygent.agent(model=model_for("chat", sim), tools=[lookup])
        result = await raygent.batch(
            bot,
            ["a", "b"],
            provider_batch=QUICK,
            run_options={"on": {name: note for name in names}},
            progress=False,
        )
    assert result.report.succeeded == 2
    for item in result.items:
        mine = [kind for kind, run_id in seen if run_id == item.result.run_id]
        assert mine.count("agent.trip.started") == mine.count("agent.trip.completed") == 2
        assert mine.count("agent.tool.called") == mine.count("agent.completed") == 1
