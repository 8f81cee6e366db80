"""The gateway's side of tenants (plain Python, no Ray): an endpoint's bound split among
its holders by their tenants' weights, each tenant's weight spread over the holders busy
for it; and the weighted water-fill beneath it."""

from __future__ import annotations

from raygent.actors.gateway.endpoint_ledger import Bounds, EndpointLedger, Report, waterfill


def _report(
    seq: int, want: int, tenants: tuple[tuple[str, float], ...], version: int = 0
) -> Report:
    return Report(seq, version, "me", want, 0, 0, tenants=tenants)


def _settled(ledger: EndpointLedger, holders: dict[str, tuple[tuple[str, float], ...]]) -> None:
    """Each holder applied its latest grant and uses nothing: what it held is free."""
    for seq in (2, 3):
        for holder, tenants in holders.items():
            version = ledger.holders[holder].version
            ledger.report(holder, _report(seq, 64, tenants, version), "me", now=0.0, ttl=10)


def test_waterfill_by_weight() -> None:
    assert waterfill(16, {"a": 64, "b": 64}, {"a": 1.0, "b": 3.0}) == {"a": 4, "b": 12}
    # What one does not want goes to the others, by weight.
    assert waterfill(16, {"a": 2, "b": 64, "c": 64}, {"a": 3.0, "b": 1.0, "c": 1.0}) == {
        "a": 2,
        "b": 7,
        "c": 7,
    }
    # Equal weights (or none): as before.
    assert waterfill(32, {"a": 4, "b": 64, "c": 64}, None) == {"a": 4, "b": 14, "c": 14}
    assert waterfill(32, {"a": 4, "b": 64, "c": 64}, {"a": 1, "b": 1, "c": 1}) == {
        "a": 4,
        "b": 14,
        "c": 14,
    }


def test_a_tenants_weight_is_spread_over_the_holders_busy_for_it() -> None:
    ledger = EndpointLedger(Bounds(16), now=0.0)
    light, heavy = (("light", 1.0),), (("heavy", 3.0),)
    ledger.report("one", _report(1, 64, light), "me", now=0.0, ttl=10)
    ledger.report("two", _report(1, 64, heavy), "me", now=0.0, ttl=10)
    ledger.report("three", _report(1, 64, heavy), "me", now=0.0, ttl=10)
    _settled(ledger, {"one": light, "two": heavy, "three": heavy})
    grants = {h: s.grant for h, s in ledger.holders.items()}
    assert grants == {"one": 4, "two": 6, "three": 6}  # light 4, heavy 12: 1:3


def test_holders_of_one_tenant_or_of_none_share_equally() -> None:
    ledger = EndpointLedger(Bounds(12), now=0.0)
    for holder in ("a", "b", "c"):
        ledger.report(holder, _report(1, 64, (("", 1.0),)), "me", now=0.0, ttl=10)
    _settled(ledger, dict.fromkeys("abc", (("", 1.0),)))
    assert {h: s.grant for h, s in ledger.holders.items()} == {"a": 4, "b": 4, "c": 4}
