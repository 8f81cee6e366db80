"""Bedrock's request authentication as the simulator checks it.

Every request must carry a well-formed AWS Signature V4 (``Authorization:
AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/bedrock/aws4_request,
SignedHeaders=...,Signature=<64 hex>``, an ``X-Amz-Date`` of the credential's day, the
signed headers present, ``host`` and ``x-amz-date`` among them, and
``X-Amz-Security-Token`` signed when the key is temporary, ``ASIA...``) or a Bedrock API
key (``Authorization: Bearer ...``). A request signed with one of the simulator's known
test credentials (:data:`TEST_CREDENTIALS`, :data:`TEST_SESSION_CREDENTIALS`) has its
signature recomputed with botocore and compared; other keys are only checked for form
(the simulator cannot know their secret). What fails is answered 403 with the error
type AWS answers it with.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "TEST_CREDENTIALS",
    "TEST_SESSION_CREDENTIALS",
    "AuthRefusal",
    "AwsTestCredentials",
    "authenticate",
]


@dataclass(frozen=True)
class AwsTestCredentials:
    """A key pair (and session token) the simulator knows, so it verifies signatures
    made with it."""

    access_key: str
    secret_key: str
    session_token: str | None = None


TEST_CREDENTIALS = AwsTestCredentials(
    "AKIASIMULATOR0000001", "sim/secret+key/for/tests/only/000000000"
)
TEST_SESSION_CREDENTIALS = AwsTestCredentials(
    "ASIASIMULATOR0000001", "sim/session+secret/for/tests/only/00000", "sim-session-token-1"
)
_KNOWN = {c.access_key: c for c in (TEST_CREDENTIALS, TEST_SESSION_CREDENTIALS)}

_SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[A-Z0-9]{16,128})/(?P<date>\d{8})/"
    r"(?P<region>[a-z0-9-]+)/(?P<service>[a-z0-9-]+)/aws4_request,\s*"
    r"SignedHeaders=(?P<signed>[a-z0-9-]+(?:;[a-z0-9-]+)*),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)
_AMZ_DATE = re.compile(r"^\d{8}T\d{6}Z$")
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service "
    "documentation for details."
)
_BAD_TOKEN = "The security token included in the request is invalid."


@dataclass(frozen=True, slots=True)
class AuthRefusal:
    """Why a request was refused: the error type (``x-amzn-ErrorType``) and message."""

    error_type: str
    message: str
    status: int = 403


@dataclass(frozen=True, slots=True)
class Signed:
    """What a valid Authorization header says: the access key (or API key) and the
    region it was signed for (None for an API key)."""

    key: str
    region: str | None


def authenticate(
    method: str,
    host: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    service: str = "bedrock",
) -> Signed | AuthRefusal:
    """Check a request's credentials (see the module's docstring)."""
    auth = headers.get("Authorization")
    if not auth:
        return AuthRefusal("MissingAuthenticationTokenException", "Missing Authentication Token")
    if auth.startswith("Bearer "):
        token = auth[7:].strip()
        if not token:
            return AuthRefusal("UnrecognizedClientException", _BAD_TOKEN)
        return Signed(token, None)
    found = _SIGV4.match(auth)
    if found is None:
        return AuthRefusal(
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' "
            f"parameters of an AWS4-HMAC-SHA256 signature. Authorization={auth[:24]}...",
        )
    refusal = _check_form(found, headers, service)
    if refusal is not None:
        return refusal
    known = _KNOWN.get(found["key"])
    if known is not None:
        refusal = _verify(known, found, method, host, raw_path, headers, body)
        if refusal is not None:
            return refusal
    return Signed(found["key"], found["region"])


def _check_form(
    found: re.Match[str], headers: Mapping[str, str], service: str
) -> AuthRefusal | None:
    if found["service"] != service:
        return AuthRefusal(
            "InvalidSignatureException",
            f"Credential should be scoped to correct service: '{service}'.",
        )
    amz_date = headers.get("X-Amz-Date", "")
    if not _AMZ_DATE.match(amz_date):
        return AuthRefusal(
            "IncompleteSignatureException",
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        )
    if amz_date[:8] != found["date"]:
        return AuthRefusal(
            "InvalidSignatureException",
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{found['date']}' != '{amz_date[:8]}', from '{amz_date}'.",
        )
    signed = found["signed"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return AuthRefusal(
            "InvalidSignatureException",
            "'Host' and 'X-Amz-Date' must be among the SignedHeaders.",
        )
    missing = [name for name in signed if name not in headers]
    if missing:
        return AuthRefusal("InvalidSignatureException", f"Signed headers missing: {missing}.")
    temporary = found["key"].startswith("ASIA")
    token = headers.get("X-Amz-Security-Token")
    if temporary and (not token or "x-amz-security-token" not in signed):
        return AuthRefusal("UnrecognizedClientException", _BAD_TOKEN)
    return None


def _verify(
    known: AwsTestCredentials,
    found: re.Match[str],
    method: str,
    host: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
) -> AuthRefusal | None:
    """Recompute the signature with botocore; without botocore, the form suffices."""
    if (
        known.session_token is not None
        and headers.get("X-Amz-Security-Token") != known.session_token
    ):
        return AuthRefusal("UnrecognizedClientException", _BAD_TOKEN)
    try:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
    except ImportError:  # pragma: no cover - botocore is in the test extra
        return None
    signed = found["signed"].split(";")
    request = AWSRequest(
        method=method,
        url=f"http://{host}{raw_path}",
        data=body,
        headers={name: headers[name] for name in signed},
    )
    request.context["timestamp"] = headers["X-Amz-Date"]
    signer = SigV4Auth(
        Credentials(known.access_key, known.secret_key, known.session_token),
        found["service"],
        found["region"],
    )
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    if not hmac.compare_digest(expected, found["signature"]):
        return AuthRefusal("InvalidSignatureException", _MISMATCH)
    return None
