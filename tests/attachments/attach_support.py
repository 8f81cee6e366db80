"""Real servers and files for the attachment tests: a small HTTP(S) file server on
loopback that records what reaches it, a fixed resolver, a self-signed certificate."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# A valid 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001a5f645400000000049454e44ae426082"
)
CHUNK = b"x" * 65536


@dataclass
class Seen:
    """A request as the server got it."""

    path: str
    host: str


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[None]]


@dataclass
class FileServer:
    """An HTTP/1.1 server on a loopback address; routes by path.

    /doc.txt         a short UTF-8 document
    /image.png       the PNG
    /redirect?to=U   302 to U
    /loop            302 to itself
    /endless         a chunked body that never ends (until the client goes)
    /declared-big    declares a 10 MiB body, sends a few bytes
    /hang            reads the request, never answers
    """

    host: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> FileServer:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def url(self, path: str, host: str | None = None, scheme: str = "http") -> str:
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            target = head[0].split(" ")[1]
            headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
            self.seen.append(Seen(path=target, host=headers.get("host", headers.get("Host", ""))))
            self.arrived.set()
            await self._answer(target, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away: what the endless and hang routes expect
        finally:
            writer.close()

    async def _answer(self, target: str, writer: asyncio.StreamWriter) -> None:
        path, _, query = target.partition("?")
        if path == "/doc.txt":
            _reply(writer, 200, b"Quarterly notes: revenue up.", "text/plain")
        elif path == "/latin1.txt":
            _reply(writer, 200, "caf\xe9".encode("latin-1"), "text/plain")
        elif path == "/image.png":
            _reply(writer, 200, PNG, "image/png")
        elif path in ("/redirect", "/loop"):
            location = query.removeprefix("to=") if path == "/redirect" else "/loop"
            writer.write(
                f"HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\n"
                "connection: close\r\n\r\n".encode()
            )
        elif path == "/endless":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
                await writer.drain()
        elif path == "/declared-big":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10485760\r\n\r\nabc")
            await writer.drain()
            await self._release.wait()
        elif path.startswith("/hang"):
            await self._release.wait()
        else:
            _reply(writer, 404, b"not found", "text/plain")
        await writer.drain()


def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, media_type: str) -> None:
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: {media_type}\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n".encode()
        + body
    )


def resolver(table: dict[str, Sequence[str]]) -> Callable[[str, int], Awaitable[Sequence[str]]]:
    """A fixed DNS: host -> addresses; unknown hosts do not resolve. Records lookups."""
    lookups: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        lookups.append(host)
        if host not in table:
            raise OSError(f"no such host {host}")
        return table[host]

    resolve.lookups = lookups  # type: ignore[attr-defined]
    return resolve


def self_signed(folder: Path, name: str) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context with a certificate for the DNS name `name` only (no IP),
    and the certificate file for clients to trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file
