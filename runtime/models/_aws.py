"""AWS access for Bedrock: credentials from the standard chain, Signature V4, region and
endpoint resolution, and ConverseStream's binary event stream decoded.

Everything of AWS's comes from botocore (the `bedrock` extra), never written by hand:
the credential chain (`botocore.session.Session().get_credentials()`: environment,
shared config and credentials files with profiles, SSO, container and instance role
credentials, refreshed before they expire), `botocore.auth.SigV4Auth` for signing and
`botocore.eventstream.EventStreamBuffer` for the framing (prelude, headers, CRCs).
botocore is imported on first use, so `import raygent` never pays for it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AuthenticationError, InvalidOptionsError, ProviderResponseError
from ..redaction import register_secret

__all__ = [
    "AwsSigner",
    "StreamEvent",
    "endpoint_url",
    "iter_event_stream",
    "resolve_region",
]

BEDROCK_SERVICE = "bedrock"  # the signing name of both bedrock-runtime and bedrock
_BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"


def _botocore_missing() -> InvalidOptionsError:
    return InvalidOptionsError(
        "Bedrock needs botocore for AWS credentials and signing: pip install 'raygent[bedrock]'"
    )


def resolve_region(region: str | None = None, profile: str | None = None) -> str:
    """The region to call: `region`, else `AWS_REGION`, `AWS_DEFAULT_REGION`, else the
    profile's `region` in the shared config (InvalidOptionsError when none says)."""
    found = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not found:
        try:
            import botocore.session
        except ImportError:
            raise _botocore_missing() from None
        found = botocore.session.Session(profile=profile).get_config_variable("region")
    if not found:
        raise InvalidOptionsError(
            "no AWS region: pass region=, or set AWS_REGION or a profile's region"
        )
    return str(found)


def endpoint_url(region: str, service: str = "bedrock-runtime") -> str:
    """The endpoint of `service` ("bedrock-runtime", "bedrock") in `region`:
    `AWS_ENDPOINT_URL_<SERVICE>` or `AWS_ENDPOINT_URL` when set (AWS's own variables
    for a service's endpoint), else the public endpoint."""
    own = "AWS_ENDPOINT_URL_" + service.upper().replace("-", "_")
    given = os.environ.get(own) or os.environ.get("AWS_ENDPOINT_URL")
    if given:
        return given.rstrip("/")
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://{service}.{region}.{suffix}"


class AwsSigner:
    """Signs requests to Bedrock for one region.

    Credentials: `access_key`/`secret_key` (and `session_token`) when given; else a
    Bedrock API key (`bearer_token`, or `AWS_BEARER_TOKEN_BEDROCK`), sent as
    `Authorization: Bearer`; else botocore's standard chain for `profile`. Chain
    credentials are looked up once per process and refreshed by botocore before they
    expire (role and SSO credentials). Picklable: a worker resolves its own.
    """

    def __init__(
        self,
        region: str,
        *,
        profile: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        bearer_token: str | None = None,
        service: str = BEDROCK_SERVICE,
    ) -> None:
        if (access_key is None) != (secret_key is None):
            raise InvalidOptionsError("give both access_key and secret_key, or neither")
        self.region = region
        self.service = service
        self.profile = profile
        self._keys = (access_key, secret_key, session_token)
        self._bearer = bearer_token
        self._credentials: Any = None
        for secret in (secret_key, session_token, bearer_token):
            if secret:
                register_secret(secret, self)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_credentials"] = None  # botocore's providers stay in their process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for secret in (*self._keys[1:], self._bearer):
            if secret:
                register_secret(secret, self)

    @property
    def needs_lookup(self) -> bool:
        """Whether the next signature first looks the credentials up (files, a role's
        endpoint: blocking I/O, which a caller on an event loop does in a thread)."""
        return self._credentials is None and self._bearer_token() is None

    def _bearer_token(self) -> str | None:
        if self._keys[0] is not None:
            return None
        return self._bearer or os.environ.get(_BEARER_ENV) or None

    def _frozen(self) -> Any:
        """The current credentials (botocore's refreshable ones renew here)."""
        try:
            from botocore.credentials import Credentials
            from botocore.session import Session
        except ImportError:
            raise _botocore_missing() from None
        if self._credentials is None:
            access, secret, token = self._keys
            if access is not None:
                self._credentials = Credentials(access, secret, token)
            else:
                self._credentials = Session(profile=self.profile).get_credentials()
            if self._credentials is None:
                raise AuthenticationError(
                    "no AWS credentials found: set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, a profile, or a role (botocore's chain)",
                    provider="bedrock",
                )
        frozen = self._credentials.get_frozen_credentials()
        for secret in (frozen.secret_key, frozen.token):
            if secret:
                register_secret(secret, self)
        return frozen

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> dict[str, str]:
        """`headers` with the request's credentials added: `Authorization`,
        `X-Amz-Date` and `X-Amz-Security-Token` (Signature V4 over the method, URL,
        headers and body), or the API key's `Authorization: Bearer`."""
        bearer = self._bearer_token()
        if bearer is not None:
            return {**headers, "Authorization": f"Bearer {bearer}"}
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        SigV4Auth(self._frozen(), self.service, self.region).add_auth(request)
        return dict(request.headers.items())


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event-stream message: `message_type` ("event", "exception" or "error"),
    `kind` (the event's `:event-type`, the exception's `:exception-type`, an error's
    `:error-code`) and the payload (JSON, for Bedrock)."""

    message_type: str
    kind: str
    payload: bytes
    headers: dict[str, Any]


async def iter_event_stream(chunks: AsyncIterator[bytes]) -> AsyncGenerator[StreamEvent, None]:
    """Decode a byte stream into event-stream messages as they complete (CRCs checked
    by botocore's parser). A damaged frame raises ProviderResponseError; a message cut
    off by the end of the stream is not yielded (the caller decides whether the stream
    was complete)."""
    try:
        from botocore.eventstream import EventStreamBuffer, ParserError
    except ImportError:
        raise _botocore_missing() from None
    buffer = EventStreamBuffer()
    async for chunk in chunks:
        buffer.add_data(chunk)
        try:
            for message in buffer:
                headers = dict(message.headers)
                kind = str(message.headers.get(":message-type", "event"))
                name = (
                    headers.get(":event-type")
                    or headers.get(":exception-type")
                    or headers.get(":error-code")
                    or ""
                )
                yield StreamEvent(kind, str(name), bytes(message.payload), headers)
        except ParserError as exc:
            raise ProviderResponseError(
                f"bedrock: a damaged event-stream frame ({type(exc).__name__}: {exc})",
                provider="bedrock",
            ) from None
