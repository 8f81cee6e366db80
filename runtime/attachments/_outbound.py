"""The outbound policy and the guarded fetcher: what raygent itself may download.

Every hop (the first URL and each redirect) is checked before any connection: the
scheme, the host allowlist, then every address the host resolves to (private, loopback,
link-local, reserved, multicast, unspecified and other non-global addresses are refused,
IPv4 embedded in IPv6 included). The request then goes to the checked address itself,
with the host name in the Host header and in TLS SNI (so the certificate is still
verified for the name): a second, different DNS answer cannot slip in (DNS rebinding).
Redirects are followed here, never by the client. The body is read in chunks and cut at
the size cap; the whole fetch has one deadline.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urljoin, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import AttachmentError, OfflineError, OutboundPolicyError

__all__ = [
    "Fetched",
    "OutboundPolicy",
    "Resolver",
    "check_url_shape",
    "fetch",
    "literal_ip",
    "refusal",
    "shown_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_REFUSED_FLAGS = ("loopback", "link_local", "unspecified", "multicast", "private", "reserved")


class OutboundPolicy(BaseModel):
    """What a download may reach. Defaults: https only, any public host, 5 MiB, 10 s.

    `allowed_hosts` limits hosts to those names (`"*.example.com"` for subdomains);
    `trusted_networks` (CIDRs, empty by default) exempts addresses from the
    private-address refusal, for an internal server trusted on purpose; `resolver`
    replaces DNS (`async (host, port) -> [ip, ...]`: custom DNS, or tests); `ca_file`
    adds a CA bundle to trust besides the system's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    schemes: tuple[str, ...] = ("https",)
    allowed_hosts: tuple[str, ...] | None = None
    trusted_networks: tuple[str, ...] = ()
    max_bytes: int = Field(default=5 * 1024 * 1024, gt=0)
    timeout: float = Field(default=10.0, gt=0)
    max_redirects: int = Field(default=5, ge=0)
    resolver: Resolver | None = None
    ca_file: str | None = None

    @field_validator("trusted_networks")
    @classmethod
    def _networks_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(ipaddress.ip_network(n, strict=False)) for n in value)

    @field_validator("schemes", "allowed_hosts")
    @classmethod
    def _lower(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else tuple(v.lower().rstrip(".") for v in value)


@dataclass(frozen=True)
class Fetched:
    """A downloaded body, the URL it finally came from, and its declared media type."""

    url: str
    body: bytes
    content_type: str | None


@dataclass(frozen=True)
class _Target:
    """One checked hop: where to connect and what to say to it."""

    parts: SplitResult
    host: str
    port: int
    address: IPAddress
    literal: bool

    def request(self) -> httpx.Request:
        ip = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        path = self.parts.path or "/"
        query = f"?{self.parts.query}" if self.parts.query else ""
        url = f"{self.parts.scheme}://{ip}:{self.port}{path}{query}"
        shown = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != _DEFAULT_PORTS[self.parts.scheme]:
            shown = f"{shown}:{self.port}"
        # identity: the size cap counts what arrives, not what a small gzip inflates to.
        headers = {"host": shown, "accept-encoding": "identity", "user-agent": "raygent"}
        tls = self.parts.scheme == "https" and not self.literal
        extensions = {"sni_hostname": self.host} if tls else {}
        return httpx.Request("GET", url, headers=headers, extensions=extensions)


def shown_url(url: str) -> str:
    """A URL for messages and reports: no credentials, no query (it may hold tokens)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparsable url>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _denied(message: str, reason: str, url: str) -> OutboundPolicyError:
    return OutboundPolicyError(message, reason=reason, url=shown_url(url))


def check_url_shape(url: str, policy: OutboundPolicy) -> tuple[SplitResult, str, int]:
    """The checks that need no DNS: a parsable URL, an allowed scheme and host."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError:
        raise _denied(f"not a valid URL: {shown_url(url)}", "invalid_url", url) from None
    if parts.scheme not in policy.schemes or parts.scheme not in _DEFAULT_PORTS:
        allowed = ", ".join(policy.schemes)
        raise _denied(f"{parts.scheme or 'no'} scheme refused (allowed: {allowed})", "scheme", url)
    if parts.username is not None or parts.password is not None:
        raise _denied("URLs with credentials are refused", "credentials_in_url", url)
    if not host:
        raise _denied(f"no host in {shown_url(url)}", "invalid_url", url)
    if policy.allowed_hosts is not None and not _host_allowed(host, policy.allowed_hosts):
        raise _denied(f"host {host!r} is not on the allowlist", "host_not_allowed", url)
    return parts, host, port or _DEFAULT_PORTS[parts.scheme]


def _host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    for entry in allowed:
        if entry.startswith("*.") and host.endswith(entry[1:]):
            return True
        if host == entry.strip("[]"):
            return True
    return False


def literal_ip(host: str) -> IPAddress | None:
    """The address a host names literally, in any spelling the C resolver accepts
    (`2130706433`, `0177.0.0.1`, `0x7f.1` are all 127.0.0.1); None for a host name."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def refusal(address: IPAddress, policy: OutboundPolicy) -> str | None:
    """Why an address may not be reached (None: it may)."""
    if any(address in ipaddress.ip_network(n) for n in policy.trusted_networks):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside IPv6 reaches that IPv4 host: judge the IPv4 address.
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address.teredo is not None:
            inner = address.teredo[1]
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None and (why := refusal(inner, policy)) is not None:
            return why
    for flag in _REFUSED_FLAGS:
        if getattr(address, f"is_{flag}"):
            return flag
    return None if address.is_global else "not_global"


async def _resolve(host: str, port: int, policy: OutboundPolicy, url: str) -> list[IPAddress]:
    if policy.resolver is None and os.environ.get("RAYGENT_OFFLINE") and host != "localhost":
        # No DNS query leaves the machine in offline mode.
        raise OfflineError(f"RAYGENT_OFFLINE is set: refusing to resolve {host!r}")
    try:
        if policy.resolver is not None:
            found = list(await policy.resolver(host, port))
        else:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            found = [str(info[4][0]) for info in infos]
        addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
    except (OSError, ValueError) as exc:
        shown = shown_url(url)
        raise AttachmentError(f"cannot resolve {host!r}: {exc}", attachment=shown) from None
    if not addresses:
        raise AttachmentError(f"{host!r} resolves to no address", attachment=shown_url(url))
    return addresses


async def _target(url: str, policy: OutboundPolicy) -> _Target:
    parts, host, port = check_url_shape(url, policy)
    literal = literal_ip(host)
    addresses = [literal] if literal is not None else await _resolve(host, port, policy, url)
    # Every answer must pass, not only the one used: no mixed public/private answers.
    for address in addresses:
        why = refusal(address, policy)
        if why is not None:
            raise _denied(f"{host!r} is a {why} address ({address}): refused", why, url)
    address = addresses[0]
    if os.environ.get("RAYGENT_OFFLINE") and not address.is_loopback:
        raise OfflineError(f"RAYGENT_OFFLINE is set: refusing to fetch {shown_url(url)}")
    return _Target(parts, host, port, address, literal is not None)


async def fetch(url: str, policy: OutboundPolicy) -> Fetched:
    """GET `url` under `policy`; OutboundPolicyError when refused, AttachmentError when
    the download fails."""
    try:
        return await asyncio.wait_for(_fetch(url, policy), policy.timeout)
    except asyncio.TimeoutError:
        raise _denied(
            f"{shown_url(url)} took longer than {policy.timeout:g} s", "timeout", url
        ) from None


async def _fetch(url: str, policy: OutboundPolicy) -> Fetched:
    verify: ssl.SSLContext | bool = True
    if policy.ca_file is not None:
        verify = ssl.create_default_context()
        verify.load_verify_locations(cafile=policy.ca_file)
    # trust_env=False: no proxy from the environment routes around the address checks.
    transport = httpx.AsyncHTTPTransport(verify=verify, trust_env=False)
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        current = url
        for _ in range(policy.max_redirects + 1):
            target = await _target(current, policy)
            try:
                response = await client.send(target.request(), stream=True)
            except httpx.HTTPError as exc:
                raise AttachmentError(
                    f"fetching {shown_url(current)} failed: {type(exc).__name__}: {exc}",
                    attachment=shown_url(current),
                ) from None
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    current = urljoin(current, location)
                    continue
                return await _body(response, current, policy)
            finally:
                await response.aclose()
    raise _denied(f"more than {policy.max_redirects} redirects", "too_many_redirects", url)


async def _body(response: httpx.Response, url: str, policy: OutboundPolicy) -> Fetched:
    if response.status_code >= 300:
        raise AttachmentError(
            f"fetching {shown_url(url)} answered {response.status_code}",
            attachment=shown_url(url),
            status=response.status_code,
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > policy.max_bytes:
        raise _too_large(url, policy)
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in response.aiter_bytes():
            total += len(chunk)
            if total > policy.max_bytes:
                raise _too_large(url, policy)
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise AttachmentError(
            f"the download of {shown_url(url)} broke off: {type(exc).__name__}",
            attachment=shown_url(url),
        ) from None
    media_type = response.headers.get("content-type")
    return Fetched(url=url, body=b"".join(chunks), content_type=media_type)


def _too_large(url: str, policy: OutboundPolicy) -> OutboundPolicyError:
    return _denied(
        f"{shown_url(url)} is larger than the {policy.max_bytes}-byte cap", "too_large", url
    )
