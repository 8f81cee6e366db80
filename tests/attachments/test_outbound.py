"""The guarded fetcher against hostile URLs, redirects and bodies, over real sockets."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest
from attach_support import FileServer, resolver, self_signed

from raygent import OutboundPolicy
from raygent.attachments._outbound import fetch
from raygent.errors import AttachmentError, OutboundPolicyError

# The test server listens on 127.0.0.1; only that one address is trusted, so every
# other loopback or private address stays refused by the real check.
TRUSTED = ("127.0.0.1/32",)


def lenient(**extra: object) -> OutboundPolicy:
    """http allowed and the test server's address trusted: the checks under test are
    the ones a test does not loosen."""
    return OutboundPolicy(schemes=("http", "https"), trusted_networks=TRUSTED, **extra)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/doc.txt", "loopback"),
        ("https://127.1.2.3/doc.txt", "loopback"),
        ("https://10.0.0.8/doc.txt", "private"),
        ("https://192.168.1.1/doc.txt", "private"),
        ("https://169.254.169.254/latest/meta-data/", "link_local"),
        ("https://[::1]/doc.txt", "loopback"),
        ("https://[::ffff:127.0.0.1]/doc.txt", "loopback"),
        ("https://[::ffff:a9fe:a9fe]/latest/meta-data/", "link_local"),
        ("https://[2002:7f00:1::]/doc.txt", "loopback"),  # 6to4 around 127.0.0.1
        ("https://[fe80::1]/doc.txt", "link_local"),
        ("https://0.0.0.0/doc.txt", "unspecified"),
        ("https://2130706433/doc.txt", "loopback"),  # decimal 127.0.0.1
        ("https://0177.0.0.1/doc.txt", "loopback"),  # octal
        ("https://0x7f.1/doc.txt", "loopback"),  # hex, short form
        ("https://017700000001/doc.txt", "loopback"),  # one octal number
        ("https://100.64.0.1/doc.txt", "not_global"),  # carrier-grade NAT
        ("https://localhost/doc.txt", "loopback"),  # a name that resolves to loopback
    ],
)
async def test_private_and_special_addresses_are_refused(url: str, reason: str) -> None:
    with pytest.raises(OutboundPolicyError) as caught:
        await fetch(url, OutboundPolicy())
    assert caught.value.reason == reason
    assert (caught.value.code, caught.value.category, caught.value.retryable) == (
        "OUTBOUND_POLICY",
        "policy",
        False,
    )


async def test_http_is_refused_by_default_before_any_connection() -> None:
    async with FileServer() as server:
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(server.url("/doc.txt"), OutboundPolicy(trusted_networks=TRUSTED))
    assert caught.value.reason == "scheme"
    assert server.seen == []


async def test_a_trusted_address_is_fetched_and_its_body_returned() -> None:
    async with FileServer() as server:
        fetched = await fetch(server.url("/doc.txt"), lenient())
    assert fetched.body == b"Quarterly notes: revenue up."
    assert fetched.content_type == "text/plain"
    assert [s.path for s in server.seen] == ["/doc.txt"]


async def test_the_host_allowlist_refuses_other_hosts() -> None:
    policy = lenient(allowed_hosts=("files.example.com", "*.cdn.example.com"))
    table = {"a.cdn.example.com": ["127.0.0.1"], "files.example.com": ["127.0.0.1"]}
    async with FileServer() as server:
        refused = server.url("/doc.txt")  # 127.0.0.1 is trusted, but not on the list
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(refused, policy)
        allowed = server.url("/doc.txt", host="a.cdn.example.com")
        fetched = await fetch(allowed, policy.model_copy(update={"resolver": resolver(table)}))
    assert caught.value.reason == "host_not_allowed"
    assert fetched.body.startswith(b"Quarterly")
    assert [s.path for s in server.seen] == ["/doc.txt"]


async def test_the_connection_goes_to_the_checked_address_under_the_host_name() -> None:
    lookup = resolver({"files.test": ["127.0.0.1"]})
    async with FileServer() as server:
        await fetch(server.url("/doc.txt", host="files.test"), lenient(resolver=lookup))
    assert lookup.lookups == ["files.test"]  # type: ignore[attr-defined]
    assert server.seen[0].host == f"files.test:{server.port}"


async def test_a_host_with_any_private_answer_is_refused() -> None:
    # One public and one private answer: the client could pick either; refuse.
    lookup = resolver({"mixed.test": ["93.184.216.34", "10.1.2.3"]})
    with pytest.raises(OutboundPolicyError) as caught:
        await fetch("https://mixed.test/doc.txt", OutboundPolicy(resolver=lookup))
    assert caught.value.reason == "private"


@pytest.mark.parametrize(
    "target",
    [
        "http://internal.test:{port2}/doc.txt",  # a name resolving to a private address
        "http://127.0.0.2:{port2}/doc.txt",  # a loopback address that is not trusted
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port2}/doc.txt",
        "http://2130706434:{port2}/doc.txt",  # decimal 127.0.0.2
    ],
)
async def test_a_redirect_to_a_private_host_is_refused_before_connecting(target: str) -> None:
    lookup = resolver({"files.test": ["127.0.0.1"], "internal.test": ["127.0.0.2"]})
    policy = lenient(resolver=lookup)
    async with FileServer() as public, FileServer(host="127.0.0.2") as private:
        location = target.format(port2=private.port)
        start = public.url(f"/redirect?to={location}", host="files.test")
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(start, policy)
    assert caught.value.reason in {"loopback", "link_local"}
    assert [s.path for s in public.seen] == [f"/redirect?to={location}"]
    assert private.seen == []  # the private server never got a request


async def test_a_redirect_to_an_allowed_host_is_followed() -> None:
    async with FileServer() as server:
        start = server.url(f"/redirect?to={server.url('/doc.txt')}")
        fetched = await fetch(start, lenient())
    assert fetched.body.startswith(b"Quarterly")
    assert fetched.url == server.url("/doc.txt")


async def test_redirects_are_capped() -> None:
    async with FileServer() as server:
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(server.url("/loop"), lenient(max_redirects=2))
    assert caught.value.reason == "too_many_redirects"
    assert len(server.seen) == 3


async def test_an_endless_body_is_cut_at_the_size_cap() -> None:
    async with FileServer() as server:
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(server.url("/endless"), lenient(max_bytes=300_000))
    assert caught.value.reason == "too_large"


async def test_a_declared_length_over_the_cap_is_refused_without_reading() -> None:
    async with FileServer() as server:
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(server.url("/declared-big"), lenient())
    assert caught.value.reason == "too_large"


async def test_a_server_that_never_answers_hits_the_deadline() -> None:
    async with FileServer() as server:
        with pytest.raises(OutboundPolicyError) as caught:
            await fetch(server.url("/hang"), lenient(timeout=0.3))
    assert caught.value.reason == "timeout"
    assert [s.path for s in server.seen] == ["/hang"]


async def test_an_error_status_is_an_attachment_error() -> None:
    async with FileServer() as server:
        with pytest.raises(AttachmentError) as caught:
            await fetch(server.url("/missing.txt"), lenient())
    assert caught.value.status == 404


async def test_credentials_in_a_url_are_refused() -> None:
    with pytest.raises(OutboundPolicyError) as caught:
        await fetch("https://files.test@10.0.0.1/doc.txt", OutboundPolicy())
    assert caught.value.reason == "credentials_in_url"
    assert "files.test" not in caught.value.url  # no credentials in the report


async def test_https_is_verified_for_the_name_while_connecting_to_the_address(
    tmp_path: Path,
) -> None:
    # The certificate names files.test only; the client connects to 127.0.0.1. Only SNI
    # and verification against the name (not the address) make this work.
    tls, cert = self_signed(tmp_path, "files.test")
    lookup = resolver({"files.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    policy = OutboundPolicy(trusted_networks=TRUSTED, resolver=lookup, ca_file=str(cert))
    async with FileServer(tls=tls) as server:
        fetched = await fetch(server.url("/doc.txt", "files.test", "https"), policy)
        with pytest.raises(AttachmentError):  # a name the certificate does not hold
            await fetch(server.url("/doc.txt", "other.test", "https"), policy)
    assert fetched.body.startswith(b"Quarterly")
    assert server.seen[0].host == f"files.test:{server.port}"


async def test_offline_mode_refuses_dns_for_names_other_than_localhost() -> None:
    # RAYGENT_OFFLINE=1 in the test session: no DNS query leaves the machine.
    from raygent.errors import OfflineError

    with pytest.raises(OfflineError):
        await fetch("https://example.com/doc.txt", OutboundPolicy())


def test_policies_validate_and_pickle() -> None:
    policy = OutboundPolicy(trusted_networks=("10.0.0.0/8",), allowed_hosts=("Files.Test.",))
    assert policy.allowed_hosts == ("files.test",)
    assert pickle.loads(pickle.dumps(policy)) == policy
    with pytest.raises(ValueError):
        OutboundPolicy(trusted_networks=("not-a-network",))
    with pytest.raises(ValueError):
        OutboundPolicy(max_bytes=0)
    err = OutboundPolicyError("no", reason="private", url="https://x/")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is OutboundPolicyError and again.to_dict() == err.to_dict()


async def test_fetches_run_concurrently_without_sharing_state() -> None:
    async with FileServer() as server:
        bodies = await asyncio.gather(*(fetch(server.url("/doc.txt"), lenient()) for _ in range(5)))
    assert {b.body for b in bodies} == {b"Quarterly notes: revenue up."}
