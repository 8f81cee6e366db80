"""The budget's arithmetic, without a provider: a run's ledger, a request's worst case,
the gateway's book of a job's budget, and a holder's lease on it (driven in-process)."""

from __future__ import annotations

import asyncio
import math

import pytest

from raygent import Budget, BudgetExceededError, Pricing, Usage, UserMessage
from raygent._batch import BatchReport, BatchResult
from raygent._batch.cli import summary
from raygent.actors.gateway.budget_book import BudgetBook, Claim, Slice
from raygent.actors.gateway.budget_lease import BudgetLease
from raygent.budgets import NOTHING, BudgetReport, LocalBudgetLedger, worst_case
from raygent.errors import InvalidOptionsError
from raygent.models import ModelOptions, OpenAIModel
from raygent.usage import dollars

ONE = (1.0, 10.0, 4.0, 6.0, 1.0)  # a request: $1, 10 tokens (4 in, 6 out), 1 request


async def test_a_reservation_waits_for_those_in_flight_and_fails_when_it_never_fits() -> None:
    ledger = LocalBudgetLedger(Budget(usd=2.5))
    await ledger.reserve(ONE)
    await ledger.reserve(ONE)
    # $2 reserved: a third $1 fits only once a request in flight settles (for less).
    third = asyncio.ensure_future(ledger.reserve(ONE))
    await asyncio.sleep(0)  # one turn of the loop: it is parked, not refused
    assert not third.done()
    ledger.settle(ONE, (0.25, 3.0, 1.0, 2.0, 1.0))
    await third
    spent, reserved = await ledger.standing()
    assert spent[0] == 0.25 and reserved[0] == 2.0
    ledger.settle(ONE, NOTHING)
    ledger.settle(ONE, (0.25, 3.0, 1.0, 2.0, 1.0))
    # $0.50 spent: $2.50 can never fit, whatever settles: refused at once.
    with pytest.raises(BudgetExceededError) as caught:
        await ledger.reserve((2.5, 0, 0, 0, 1))
    error = caught.value
    assert error.code == "BUDGET_EXCEEDED" and error.retryable is False
    assert (error.dimension, error.limit, error.spent, error.needed) == ("usd", 2.5, 0.5, 2.5)
    assert ledger.exhausted is error
    await ledger.reserve((2.0, 0, 0, 0, 1))  # what is left still fits


async def test_each_dimension_is_held() -> None:
    for budget, dimension in (
        (Budget(tokens=15), "tokens"),
        (Budget(input_tokens=7), "input_tokens"),
        (Budget(output_tokens=11), "output_tokens"),
        (Budget(requests=1), "requests"),
    ):
        ledger = LocalBudgetLedger(budget)
        await ledger.reserve(ONE)
        ledger.settle(ONE, ONE)
        with pytest.raises(BudgetExceededError) as caught:
            await ledger.reserve(ONE)
        assert caught.value.dimension == dimension


def test_a_budget_takes_its_limits_in_order_and_refuses_negative_ones() -> None:
    assert Budget(1.5, 100, requests=3).limits == (1.5, 100.0, math.inf, math.inf, 3.0)
    with pytest.raises(InvalidOptionsError, match="cannot be negative"):
        Budget(usd=-1)


def test_a_budget_with_no_limit_is_refused_in_raygents_words() -> None:
    with pytest.raises(InvalidOptionsError, match=r"Budget\(\) needs a limit: usd="):
        Budget()
    with pytest.raises(InvalidOptionsError, match="takes a number"):
        Budget(usd="5")  # type: ignore[arg-type]


def test_the_worst_case_is_the_prompt_estimated_plus_the_output_cap_at_the_model_prices() -> None:
    pricing = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cache_write_per_mtok=1.25)
    model = OpenAIModel("m", base_url="http://127.0.0.1:9", api_key="k", pricing=pricing)
    text = "x" * 400  # 100 tokens of text: its JSON counts more
    amount, used = worst_case(model, [UserMessage(content=text)], ModelOptions(max_tokens=50))
    usd, tokens, prompt, output, requests = amount
    assert used == pricing and output == 50 and requests == 1
    assert 100 < prompt < 130 and tokens == prompt + output
    # Input at the highest input rate (a cache write), output at the output rate.
    assert usd == pytest.approx((prompt * 1.25 + 50 * 2.0) / 1e6)
    unpriced = OpenAIModel("no-such-model-anywhere", base_url="http://127.0.0.1:9", api_key="k")
    amount, used = worst_case(unpriced, [UserMessage(content="hi")], ModelOptions())
    assert used is None and amount[0] == 0.0 and amount[3] == 4096  # the default cap


# -- the gateway's book and a holder's lease ------------------------------------------------

TTL = 30.0


def _claim(seq: int, **fields: object) -> Claim:
    zero = (0.0,) * 5
    values: dict[str, object] = {"granted": zero, "spent": zero, "reserved": zero}
    values.update(fields)
    return Claim(seq=seq, incarnation=None, **values)  # type: ignore[arg-type]


def test_the_book_grants_what_is_free_and_counts_each_holder_at_its_grant_or_spend() -> None:
    book = BudgetBook(Budget(usd=10).limits)
    a = book.claim("a", _claim(1, want=(6.0, 0, 0, 0, 0), need=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    b = book.claim("b", _claim(1, want=(6.0, 0, 0, 0, 0), need=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert a.granted[0] == 6.0 and b.granted[0] == 4.0  # what was left
    assert not b.exhausted
    # a spent 7 (a reply used more than its reservation): it counts at its spend.
    book.claim("a", _claim(2, granted=a.granted, spent=(7.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert book.free()[0] == 0.0
    # Nothing free: c is refused, but not for good (b holds $4 it does not use).
    c = book.claim("c", _claim(1, want=(2.0, 0, 0, 0, 0), need=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert c.granted[0] == 0.0 and not c.exhausted
    # b, with nothing in flight, gives back what it does not use.
    b = book.claim("b", _claim(2, granted=b.granted, give_back=True), "g", 0, TTL)
    assert b.granted[0] == 0.0 and not b.exhausted
    c = book.claim("c", _claim(2, want=(2.0, 0, 0, 0, 0), need=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert c.granted[0] == 2.0
    # A need that could not be met even if everything in flight settled at nothing and
    # every unused grant came back: the job's budget is exhausted, for every holder.
    d = book.claim("d", _claim(1, want=(4.0, 0, 0, 0, 0), need=(4.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert d.granted[0] == 0.0 and d.exhausted
    assert book.claim("b", _claim(3), "g", 0, TTL).exhausted


def test_a_dead_holders_grant_comes_back_when_its_lease_ends_and_its_spend_stays() -> None:
    book = BudgetBook(Budget(usd=10).limits)
    book.claim("dead", _claim(1, want=(8.0, 0, 0, 0, 0), need=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    book.claim("dead", _claim(2, granted=(8.0, 0, 0, 0, 0), spent=(3.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert book.free()[0] == 2.0
    assert not book.expire(now=TTL + 1)  # it stopped reporting: its lease ended
    assert book.free()[0] == 7.0 and book.stats()["spent"][0] == 3.0  # type: ignore[index]


def test_a_report_older_than_one_applied_changes_nothing() -> None:
    book = BudgetBook(Budget(usd=10).limits)
    book.claim("a", _claim(2, spent=(4.0, 0, 0, 0, 0)), "g", 0, TTL)
    book.claim("a", _claim(1, spent=(1.0, 0, 0, 0, 0)), "g", 0, TTL)
    assert book.stats()["spent"][0] == 4.0  # type: ignore[index]


def test_a_restarted_gateway_takes_each_holders_claim_on_its_grant() -> None:
    book = BudgetBook(Budget(usd=10).limits)  # a new gateway: it knows nothing yet
    claim = Claim(1, "old-gateway", (6.0, 0, 0, 0, 0), (2.0, 0, 0, 0, 0), (0.0,) * 5)
    assert book.claim("a", claim, "new-gateway", 0, TTL).granted[0] == 6.0
    assert book.free()[0] == 4.0


class _InProcess:
    """A lease's channel straight to a book (the gateway's role, without Ray)."""

    def __init__(self, book: BudgetBook) -> None:
        self.book, self.calls = book, 0
        self.holder = "h"

    async def claim(self, claim: Claim) -> Slice:
        self.calls += 1
        return self.book.claim(self.holder, claim, "g", 0.0, TTL)

    def release_nowait(self, claim: Claim) -> None:
        self.book.claim(self.holder, claim, "g", 0.0, TTL)


async def test_a_lease_asks_its_gateway_once_per_slice_not_once_per_request() -> None:
    book = BudgetBook(Budget(usd=100).limits)
    channel = _InProcess(book)
    lease = BudgetLease(Budget(usd=100), channel)
    for _ in range(40):
        await lease.reserve(ONE)
        lease.settle(ONE, (0.5, 5.0, 2.0, 3.0, 1.0))
    assert channel.calls <= 6  # slices of at least 8 requests' worth
    for _ in range(80):  # $20 spent, $80 in flight: the whole budget is held
        await lease.reserve(ONE)
    assert book.stats()["counted"][0] <= 100.0  # type: ignore[index]
    waiting = asyncio.ensure_future(lease.reserve(ONE))
    await asyncio.sleep(0)  # one turn of the loop: it waits for a request in flight
    assert not waiting.done()
    lease.settle(ONE, (0.5, 5.0, 2.0, 3.0, 1.0))
    lease.settle(ONE, (0.5, 5.0, 2.0, 3.0, 1.0))  # $1 of room again
    await waiting
    # $80 could not fit even if everything in flight settled at nothing: refused.
    with pytest.raises(BudgetExceededError):
        await lease.reserve((80.0, 0.0, 0.0, 0.0, 1.0))
    assert lease.exhausted is not None and book.exhausted


async def test_a_busy_holder_asks_for_a_heartbeat_periods_requests_up_to_an_eighth() -> None:
    book = BudgetBook(Budget(usd=1000).limits)
    channel = _InProcess(book)
    lease = BudgetLease(Budget(usd=1000), channel)
    for _ in range(500):  # far more requests a second than its slices of 16 would cover
        await lease.reserve(ONE)
        lease.settle(ONE, ONE)
    # Asked once per 16 requests, that would be 31 calls; at its rate, it asks for up to
    # an eighth of the budget ($125) at once.
    assert channel.calls <= 8, channel.calls
    assert max(book.holders["h"].granted[0] - 500, 0.0) <= 125.0 + 16.0
    assert book.stats()["counted"][0] <= 1000.0  # type: ignore[index]


async def test_a_holder_often_idle_tells_its_gateway_at_most_every_quarter_second() -> None:
    book = BudgetBook(Budget(usd=100).limits)
    channel = _InProcess(book)
    lease = BudgetLease(Budget(usd=100), channel)
    for _ in range(50):  # busy (3 in flight), idle, busy...: each spell a turn of the loop
        for _ in range(3):
            await lease.reserve(ONE)
        await asyncio.sleep(0)
        for _ in range(3):
            lease.settle(ONE, (0.5, 5.0, 2.0, 3.0, 1.0))
        await asyncio.sleep(0)
    # Its claims for slices, and an idle tell at most every quarter second.
    assert channel.calls <= 12, channel.calls
    await lease.flush()  # a runner's share ended: its standing is told now
    assert book.stats()["reserved"][0] == 0.0  # type: ignore[index]
    assert book.stats()["spent"][0] == 75.0  # type: ignore[index]


def test_a_reservation_settled_to_float_noise_prints_as_zero_not_negative() -> None:
    # What a job's ledger holds once every request settled: float noise around zero.
    report = BudgetReport.of(Budget(usd=1.0), (0.3, 0, 0, 0, 3), (-1e-12, 0, 0, 0, 0))
    assert str(report.reserved.usd) == "0.0"
    result = BatchResult(items=[], data=[], usage=Usage(), report=BatchReport(budget=report))
    line = summary(result).splitlines()[-1]
    assert line == "budget: $0.30 spent, $0.00 reserved, $0.70 left of $1.00"
    assert dollars(-1e-17) == "$0.00" and dollars(-0.25) == "-$0.25"
