"""Thought signatures as Gemini 3 issues and checks them.

A signature is opaque to the client: base64 of a digest of the part it was issued on and
a check sum under the simulator's key, so a signature the simulator did not issue (or
one altered by a byte) is "corrupted", and one moved to another function call, or sent
back with altered arguments, no longer matches its call. Gemini 3 refuses a function
call of the current turn (everything since the last user message with text) whose
step's first ``functionCall`` part comes back without its signature; the documented
dummy signatures skip the check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from ._types import WireError

_KEY = b"raygent-sim-gemini"
_DIGEST = 16
_CHECK = 8
SKIP = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})
GEMINI_DOCS = "https://ai.google.dev/gemini-api/docs/thought-signatures"
VERTEX_DOCS = "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures"
_SIGNATURE_KEYS = ("thoughtSignature", "thought_signature")


def _digest(part: dict[str, Any]) -> bytes:
    """What a signature binds to: a function call's name and arguments (checked on the
    way back); any other part's own content (not checked: Gemini does not validate
    those strictly, and a client may merge streamed text)."""
    call = part.get("functionCall") or part.get("function_call")
    if isinstance(call, dict):
        value = {"name": call.get("name"), "args": call.get("args") or {}}
    else:
        value = {k: v for k, v in part.items() if k not in _SIGNATURE_KEYS}
    payload = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode()).digest()[:_DIGEST]


def sign(part: dict[str, Any]) -> str:
    """The signature of `part` (a reply part, before the signature is put on it)."""
    digest = _digest(part)
    check = hmac.new(_KEY, digest, hashlib.sha256).digest()[:_CHECK]
    return base64.b64encode(digest + check).decode()


def signature_of(part: dict[str, Any]) -> object:
    for key in _SIGNATURE_KEYS:
        if key in part:
            return part[key]
    return None


def _valid(part: dict[str, Any], signature: str) -> bool:
    # Proto JSON bytes: standard or URL-safe base64, padded or not (the SDK sends
    # URL-safe), all the same bytes.
    normal = signature.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(normal + "=" * (-len(normal) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) != _DIGEST + _CHECK:
        return False
    digest, check = raw[:_DIGEST], raw[_DIGEST:]
    expected = hmac.new(_KEY, digest, hashlib.sha256).digest()[:_CHECK]
    if not hmac.compare_digest(check, expected):
        return False
    return not _is_call(part) or digest == _digest(part)


def _is_call(part: dict[str, Any]) -> bool:
    return isinstance(part.get("functionCall") or part.get("function_call"), dict)


def check(contents: list[dict[str, Any]], *, enforce: bool, vertex: bool) -> None:
    """Refuse (WireError) a corrupted signature anywhere, and, when `enforce` (Gemini 3),
    a step of the current turn whose first function call has none."""
    for content in contents:
        for part in _parts(content):
            signature = signature_of(part)
            if signature is None or signature in SKIP:
                continue
            if not isinstance(signature, str) or not _valid(part, signature):
                if vertex:
                    raise WireError(
                        "Unable to submit request because Thought signature is not valid.. "
                        "Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/"
                        "model-reference/gemini"
                    )
                raise WireError("Corrupted thought signature.")
    if not enforce:
        return
    for index in range(_turn_start(contents), len(contents)):
        content = contents[index]
        if content.get("role") != "model":
            continue
        first = next((p for p in _parts(content) if _is_call(p)), None)
        if first is not None and signature_of(first) is None:
            _missing(first, index, vertex=vertex)


def _parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    parts = content.get("parts")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _turn_start(contents: list[dict[str, Any]]) -> int:
    """The index of the last user content with standard content (text or media, not
    only function responses): the current turn starts there."""
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        if content.get("role", "user") != "user":
            continue
        parts = _parts(content)
        if any("functionResponse" not in p and "function_response" not in p for p in parts):
            return index
    return 0


def _missing(part: dict[str, Any], index: int, *, vertex: bool) -> None:
    call = part.get("functionCall") or part.get("function_call") or {}
    name = call.get("name")
    if vertex:
        raise WireError(
            f"Unable to submit request because function call `{name}` in the {index + 1}. "
            f"content block is missing a `thought_signature`. Learn more: {VERTEX_DOCS}"
        )
    raise WireError(
        "Function call is missing a thought_signature in functionCall parts. This is "
        "required for tools to work correctly, and missing thought_signature may lead to "
        f"degraded model performance. Additional data, function call `default_api:{name}` "
        f", position {index + 1}. Please refer to {GEMINI_DOCS} for more details."
    )
