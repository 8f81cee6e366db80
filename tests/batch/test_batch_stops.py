"""A configuration error met by a job's items stops the job (issue 44.2): the items not
run are reported as not run (`BATCH_STOPPED`), `report.stopped` says why, the sink holds
only what completed and `resume=True` runs the rest; an error of one item's content
(its context length, its own bad request once others completed) fails that item alone.
Both backends; on Ray the runner that meets the error stops its share at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backend_support import BACKENDS, on_backend
from batch_support import cli_on_sim, read_jsonl, sim_agent_module

import raygent
from raygent._batch.stops import CONFIRM, StopRule, config_kind
from raygent.errors import (
    AuthenticationError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    RateLimitError,
    StepFailedError,
)
from raygent.models import OpenAIModel
from raygent.seams.batch import BatchItem
from raygent.sim import Fault, Match, Reply, Rule, Simulator, serve

ITEMS = 40


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


def agent_on(sim: Simulator, key: str = "sk-test") -> raygent.Agent:
    return raygent.agent(
        model=OpenAIModel("gpt-4o", base_url=sim.openai_base_url, api_key=key), name="asker"
    )


def failing(status: int, after: int = 0) -> list[Rule]:
    """Every request answered `status`, after the first `after` answered well."""
    fault = Reply(fault=Fault(kind="status", status=status))
    return [Rule(reply="fine", times=after), Rule(reply=fault)]


def codes(items: list[BatchItem]) -> set[str]:
    return {getattr(item.error, "code", "") for item in items if not item.ok}


async def test_a_401_stops_the_job_at_once_and_the_rest_is_not_run(backend_kind: str) -> None:
    bound = 8
    async with serve(api_key="sk-right") as sim:
        result = await raygent.batch(
            agent_on(sim, key="sk-wrong"),
            [f"q{n}" for n in range(ITEMS)],
            concurrency=bound,
            progress=False,
            retry=raygent.Retry(attempts=3, retry_on=ProviderError),  # not for this error
        )
        sent = sim.stats().requests
    report = result.report
    stopped = report.stopped
    assert stopped is not None and stopped.why == "configuration"
    assert stopped.error is not None and stopped.error["code"] == "PROVIDER_AUTHENTICATION"
    assert stopped.index is not None and stopped.key == str(stopped.index)
    assert "every item would meet it" in stopped.message and not result.ok
    # Sent: what was in flight when the first 401 came back, never retried (on Ray each
    # runner stops its own share on its first 401, before the driver hears of it).
    assert sent <= bound, sent
    assert report.total == ITEMS and report.succeeded == 0
    assert 1 <= report.failed <= bound and report.failed + report.cancelled == ITEMS
    not_run = [item for item in result.items if item.status == "cancelled"]
    assert codes(not_run) == {"BATCH_STOPPED"}
    assert all(item.attempts <= 1 for item in result.items)
    assert all(item.error.stopped_by == stopped.key for item in not_run)  # type: ignore[union-attr]
    assert report.errors["BATCH_STOPPED"] == report.cancelled


async def test_check_false_fails_every_item_on_its_own(backend_kind: str) -> None:
    # A router's items may each use a model or a key of their own: no error is every
    # item's, and the job goes on (none of them retried).
    async with serve(api_key="sk-right") as sim:
        result = await raygent.batch(
            agent_on(sim, key="sk-wrong"), [f"q{n}" for n in range(12)], concurrency=4,
            progress=False, check=False,
        )  # fmt: skip
        assert sim.stats().requests == 12
    assert result.report.stopped is None and result.report.failed == 12
    assert codes(result.items) == {"PROVIDER_AUTHENTICATION"}


async def test_a_400_met_by_the_first_items_stops_the_job(backend_kind: str) -> None:
    bound = 4
    async with serve(script=failing(400)) as sim:
        result = await raygent.batch(
            agent_on(sim), [f"q{n}" for n in range(ITEMS)], concurrency=bound, progress=False
        )
        sent = sim.stats().requests
    stopped = result.report.stopped
    assert stopped is not None and stopped.why == "configuration"
    assert stopped.error is not None and stopped.error["code"] == "PROVIDER_INVALID_REQUEST"
    assert result.report.failed >= CONFIRM and sent < ITEMS
    assert codes(result.items) == {"PROVIDER_INVALID_REQUEST", "BATCH_STOPPED"}


async def test_a_key_revoked_mid_job_stops_it_the_sink_keeps_what_completed_resume_runs_the_rest(
    backend_kind: str, tmp_path: Path
) -> None:
    sink = tmp_path / "out.jsonl"
    items = [{"input": f"q{n}", "id": n} for n in range(ITEMS)]
    async with serve(script=failing(401, after=5)) as sim:
        first = await raygent.batch(agent_on(sim), items, concurrency=2, sink=sink, progress=False)
    stopped = first.report.stopped
    assert stopped is not None and stopped.why == "configuration"
    assert "resume=True" in stopped.message
    assert first.report.succeeded == 5
    rows = read_jsonl(sink)
    assert len(rows) == 5 and {row["status"] for row in rows} == {"completed"}
    assert codes(first.items) <= {"PROVIDER_AUTHENTICATION", "BATCH_STOPPED"}

    async with serve() as fixed:
        second = await raygent.batch(
            agent_on(fixed), items, concurrency=2, sink=sink, resume=True, progress=False
        )
        assert fixed.stats().requests == ITEMS - 5  # what completed is not sent again
    assert second.ok and second.report.skipped == 5 and second.report.stopped is None
    rows = read_jsonl(sink)
    assert sorted(row["key"] for row in rows) == list(range(ITEMS))
    assert {row["status"] for row in rows} == {"completed"}


async def test_items_that_fail_for_their_own_content_do_not_stop_the_job(
    backend_kind: str, tmp_path: Path
) -> None:
    # Long items first: the first items to end fail on their context length, and a few
    # others on a bad request of their own once items completed; none of it stops the job.
    long = ["word " * 400 for _ in range(CONFIRM + 2)]
    items = [*long, "fine", *(f"bad {n}" for n in range(CONFIRM + 1)), *(f"q{n}" for n in range(8))]
    own = [Rule(match=Match(last_user="^bad"), reply=Reply(fault=Fault(kind="status", status=400)))]
    async with serve(script=own, context_window=200) as sim:
        result = await raygent.batch(
            agent_on(sim), items, concurrency=1, progress=False, sink=tmp_path / "out.jsonl"
        )
    report = result.report
    assert report.stopped is None
    assert report.total == len(items) and report.succeeded == 9
    # A prompt over the context window ends the run incomplete (reason context_window).
    assert report.errors == {"AGENT_INCOMPLETE": len(long), "PROVIDER_INVALID_REQUEST": CONFIRM + 1}
    assert len(read_jsonl(tmp_path / "out.jsonl")) == len(items)  # the failures are recorded


def test_the_cli_exits_2_after_a_stop_and_says_how_to_go_on(tmp_path: Path) -> None:
    target = sim_agent_module(tmp_path, "stops_target", key="sk-wrong")
    with serve(api_key="sk-right") as sim:
        status, err, sink = cli_on_sim(
            sim.openai_base_url, tmp_path, target, 20, "--concurrency", "2"
        )
    assert status == 2, err
    assert "stopped: configuration error" in err and "PROVIDER_AUTHENTICATION" in err
    assert "to go on with this job once it is fixed: raygent batch" in err and "--resume" in err
    assert read_jsonl(sink) == []  # nothing completed, nothing recorded


# -- which errors count ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (AuthenticationError("401", status=401), "job"),
        (InvalidRequestError("no such model", status=404), "job"),
        (RateLimitError("no quota", retryable=False, provider_code="insufficient_quota"), "job"),
        (InvalidRequestError("bad schema", status=400), "shape"),
        (RateLimitError("slow down"), None),
        (ContextLengthExceededError("too long", status=400), None),
        (ValueError("a callable's own"), None),
        (StepFailedError("step", cause=AuthenticationError("401", status=401).to_dict()), "job"),
    ],
)
def test_which_errors_are_the_job_s_configuration(error: BaseException, kind: str | None) -> None:
    assert config_kind(error) == kind


def _failed(index: int, error: BaseException) -> BatchItem:
    return BatchItem(index=index, key=index, status="failed", error=error)


def test_unconfirmed_failures_are_held_out_of_the_sink_until_the_job_decides() -> None:
    rule = StopRule()
    bad = InvalidRequestError("bad schema", status=400)
    held = [rule.observe(_failed(n, bad)) for n in range(CONFIRM - 1)]
    assert all(verdict is not None and verdict.record == [] for verdict in held)
    done = rule.observe(BatchItem(index=9, key=9, status="completed"))
    assert done is not None and [item.index for item in done.record] == [*range(CONFIRM - 1), 9]
    # Once an item completed, the same error is the item's own: recorded as it is.
    assert rule.observe(_failed(10, bad)) is None

    other = StopRule()
    for n in range(CONFIRM - 1):
        other.observe(_failed(n, InvalidRequestError(f"bad item {n}", status=400)))
    last = other.observe(_failed(CONFIRM, InvalidRequestError("bad item x", status=400)))
    assert last is not None and last.stop is None  # unlike errors: not one configuration
    assert len(other.release()) == CONFIRM  # the job ended: they are recorded after all


def test_a_stop_needs_its_error_met_alike_by_the_first_items() -> None:
    rule = StopRule(resume=True)
    bad = InvalidRequestError("bad schema", status=400)
    verdicts = [rule.observe(_failed(n, bad)) for n in range(CONFIRM)]
    last = verdicts[-1]
    stop = None if last is None else last.stop
    assert stop is not None and stop.index == CONFIRM - 1 and "resume=True" in stop.message
    cancelled = rule.observe(BatchItem(index=50, key=50, status="cancelled"))
    assert cancelled is not None and cancelled.record == [] and cancelled.item.error is not None
    assert cancelled.item.error.code == "BATCH_STOPPED"  # type: ignore[attr-defined]
    completed = rule.observe(BatchItem(index=51, key=51, status="completed"))
    assert completed is not None and completed.record == [completed.item]  # kept
    assert rule.release() == []
