"""The Gemini wire (the Gemini API and Vertex AI): one per request, since the model,
the method and the endpoint are in the URL, not the body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import to_json
from typing_extensions import Unpack

from . import _gemini_reply as reply
from ._gemini_errors import bad_request, error_body, error_info
from ._gemini_request import CacheLookup, GeminiRequest, get, model_id, parse
from ._types import ErrorWhere, ParsedRequest, Plan, SSEStream

_BAD_KEY = "API key not valid. Please pass a valid API key."


def _no_caches(name: str) -> None:
    return None


class GeminiWire:
    """``generateContent`` / ``streamGenerateContent`` / ``countTokens`` of one model,
    on the Gemini API (key by ``x-goog-api-key`` or ``?key=``) or Vertex AI (a Bearer
    token; an API key in express mode)."""

    api: Final = "gemini"
    tool_id_prefix: Final = "fc_"
    request_id_header: Final = "x-goog-request-id"
    response_id_prefix: Final = "sim"

    def __init__(
        self,
        model: str,
        *,
        stream: bool = False,
        vertex: bool = False,
        query_key: str | None = None,
        caches: CacheLookup = _no_caches,
        header_tier: str | None = None,
        count: bool = False,
    ) -> None:
        self.model = model_id(model)
        self.streams = stream
        self.vertex = vertex
        self.query_key = query_key
        self.caches = caches
        self.header_tier = header_tier
        self.count = count

    def parse(self, body: object) -> GeminiRequest:
        if self.count and isinstance(body, dict):
            inner = get(body, "generateContentRequest")
            if isinstance(inner, dict):
                body = inner
        return parse(
            body,
            model=self.model,
            stream=self.streams,
            vertex=self.vertex,
            caches=self.caches,
            header_tier=self.header_tier,
        )

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        key = headers.get("x-goog-api-key") or self.query_key
        if key is None and self.vertex:
            auth = headers.get("Authorization", "")
            key = auth[7:] if auth.startswith("Bearer ") else None
        return key

    def error(self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]) -> bytes:
        if status == 401 and not self.vertex:  # a wrong key, as the Gemini API words it
            return error_body(401, message or _BAD_KEY, [error_info("API_KEY_INVALID")])
        details = (
            [bad_request(param, message or "")]
            if (param := where.get("param")) and status == 400
            else None
        )
        return error_body(status, message, details)

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes:
        message = (
            f"The input token count ({tokens}) exceeds the maximum number of tokens "
            f"allowed ({limit})."
        )
        return error_body(400, message)

    def stream_error(self, data: bytes) -> bytes:
        return b"data: " + data + b"\r\n\r\n"

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes:
        return reply.body(plan, _gemini(req), response_id)

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream:
        return reply.stream(plan, _gemini(req), response_id)

    def count_body(self, req: ParsedRequest) -> bytes:
        """A ``countTokens`` reply: the prompt's tokens by modality."""
        gemini = _gemini(req)
        details = [{"modality": k, "tokenCount": v} for k, v in sorted(gemini.modalities.items())]
        out: dict[str, Any] = {"totalTokens": req.input_tokens, "promptTokensDetails": details}
        if gemini.explicit_cached:
            out["cachedContentTokenCount"] = gemini.explicit_cached
        return to_json(out)


def _gemini(req: ParsedRequest) -> GeminiRequest:
    if not isinstance(req, GeminiRequest):
        raise TypeError("the Gemini wire renders Gemini requests only")
    return req
