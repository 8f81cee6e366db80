"""Gemini replies: ``GenerateContentResponse`` bodies and the SSE chunks of
``streamGenerateContent`` (each chunk a whole response of its own), parts with thought
summaries and thought signatures, finish reasons, a blocked prompt's
``promptFeedback``, citations, grounding and code execution, and ``usageMetadata``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic_core import from_json, to_json

from . import _gemini_signatures as signatures
from ._gemini_request import GeminiRequest
from ._tokens import count_tokens, stream_pieces
from ._types import Finish, ParsedRequest, Plan, SSEStream

_FINISH: dict[Finish, str] = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "content_filter": "SAFETY",
    "pause_turn": "STOP",
    "refusal": "STOP",
}
# Finish reasons whose candidate carries no content (the output was withheld).
_WITHHELD = frozenset(
    {"SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL"}
)
_TRAFFIC = {"flex": "ON_DEMAND_FLEX", "priority": "ON_DEMAND_PRIORITY"}
_HARMS = (
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
)


def served_tier(req: ParsedRequest) -> str:
    """The tier a reply names: ``standard`` unless flex or priority was served."""
    return req.served_tier if req.served_tier in ("flex", "priority") else "standard"


def tier_headers(req: ParsedRequest) -> dict[str, str]:
    """The Gemini API names the tier it served in ``x-gemini-service-tier`` (priority
    downgraded to standard shows there, and only there)."""
    if isinstance(req, GeminiRequest) and req.vertex:
        return {}
    return {"x-gemini-service-tier": served_tier(req)}


def safety_ratings(blocked: str | None = None) -> list[dict[str, Any]]:
    """One rating per harm category; `blocked` names the one that blocked (HIGH)."""
    return [
        {
            "category": category,
            "probability": "HIGH" if category == blocked else "NEGLIGIBLE",
            **({"blocked": True} if category == blocked else {}),
        }
        for category in _HARMS
    ]


class Reply:
    """One plan rendered for one request."""

    def __init__(self, plan: Plan, req: GeminiRequest, response_id: str) -> None:
        self.plan = plan
        self.req = req
        self.response_id = response_id
        self.finish = plan.finish_reason or _FINISH[plan.finish]
        self.thought, self.text, self.calls = self._parts()
        self.malformed = any(
            not isinstance(c["functionCall"].get("args"), dict) for c in self.calls
        )
        if self.malformed:
            self.finish = "MALFORMED_FUNCTION_CALL"
        self.code, self.grounding, self.tool_tokens = self._server_tools()
        self.signature = self._sign()

    def _parts(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
        plan, req = self.plan, self.req
        thought = None
        if plan.thinking and req.include_thoughts:
            thought = {"text": plan.thinking, "thought": True}
        words = plan.refusal if plan.refusal is not None else plan.text
        text = None if words is None else {"text": words}
        calls = []
        for call in plan.tool_calls:
            function: dict[str, Any] = {"name": call.name, "args": _args(call.arguments)}
            if call.id:  # a scripted empty id: a call without one (matched by order)
                function["id"] = call.id
            calls.append({"functionCall": function})
        return thought, text, calls

    def _server_tools(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None, int]:
        code: list[dict[str, Any]] = []
        grounding: dict[str, Any] | None = None
        tokens = 0
        for use, result in self.plan.server_tools:
            name = use.get("name")
            tokens += count_tokens(to_json(result.get("content")).decode())
            if name == "code_execution":
                source = str(use["input"].get("code", ""))
                content = result.get("content")
                output = content.get("stdout", "") if isinstance(content, dict) else ""
                code.append({"executableCode": {"language": "PYTHON", "code": source}})
                code.append({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": output}})
            elif name == "web_search":
                grounding = _grounding(use, result, self.text)
        return code, grounding, tokens

    def _sign(self) -> str | None:
        """Gemini 3 (or thinking on): the first function call carries the step's
        signature; without calls, the last part does."""
        if not self.req.signs or self.finish in _WITHHELD:
            return None
        target = self.calls[0] if self.calls else (self.text or self.thought)
        return signatures.sign(target or {"text": ""})

    def parts(self) -> list[dict[str, Any]]:
        """The candidate's parts, whole (the signature on its part)."""
        if self.finish in _WITHHELD or self.plan.empty:
            return []
        out = [p for p in (self.thought, *self.code, self.text) if p is not None]
        calls = [dict(c) for c in self.calls]
        if self.signature is not None:
            if calls:
                calls[0]["thoughtSignature"] = self.signature
            elif out:
                out[-1] = {**out[-1], "thoughtSignature": self.signature}
            else:
                out.append({"text": "", "thoughtSignature": self.signature})
        return [*out, *calls]

    def candidate(self, parts: list[dict[str, Any]], *, final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"index": 0}
        if parts or not final:
            candidate["content"] = {"parts": parts, "role": "model"}
        if not final:
            return candidate
        candidate["finishReason"] = self.finish
        if self.finish == "SAFETY":
            candidate["safetyRatings"] = safety_ratings("HARM_CATEGORY_DANGEROUS_CONTENT")
        if self.malformed:
            names = ", ".join(c["functionCall"]["name"] for c in self.calls)
            candidate["finishMessage"] = f"Malformed function call: {names}"
        if self.plan.citations and self.text is not None:
            candidate["citationMetadata"] = _citations(self.plan, self.text["text"], self.req)
        if self.grounding is not None:
            candidate["groundingMetadata"] = self.grounding
        return candidate

    def envelope(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        body["usageMetadata"] = usage
        body["modelVersion"] = self.req.model.rsplit("/", 1)[-1]
        if self.req.vertex:
            body["createTime"] = _now()
        body["responseId"] = self.response_id
        return body

    def usage(self, *, final: bool = True) -> dict[str, Any]:
        plan, req = self.plan, self.req
        prompt = plan.input_tokens
        usage: dict[str, Any] = {"promptTokenCount": prompt}
        cached = req.explicit_cached or plan.cache_read_tokens
        thoughts = plan.reasoning_tokens if final else 0
        candidates = max(plan.output_tokens - plan.reasoning_tokens, 0) if final else 0
        if self.finish in _WITHHELD:
            candidates = 0
        tools = self.tool_tokens if final else 0
        if candidates:
            usage["candidatesTokenCount"] = candidates
        usage["totalTokenCount"] = prompt + candidates + thoughts + tools
        if cached:
            usage["cachedContentTokenCount"] = cached
        details = [{"modality": k, "tokenCount": v} for k, v in sorted(req.modalities.items())]
        usage["promptTokensDetails"] = details or [{"modality": "TEXT", "tokenCount": prompt}]
        if cached:
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        if candidates:
            usage["candidatesTokensDetails"] = [{"modality": "TEXT", "tokenCount": candidates}]
        if tools:
            usage["toolUsePromptTokenCount"] = tools
            usage["toolUsePromptTokensDetails"] = [{"modality": "TEXT", "tokenCount": tools}]
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        if req.vertex:  # the Gemini API names the tier in a header only
            usage["trafficType"] = _TRAFFIC.get(req.served_tier or "", "ON_DEMAND")
        return usage


def body(plan: Plan, req: GeminiRequest, response_id: str) -> bytes:
    reply = Reply(plan, req, response_id)
    if plan.block_reason is not None:
        return to_json(_blocked(reply))
    candidates = [] if plan.empty else [reply.candidate(reply.parts(), final=True)]
    return to_json(reply.envelope({"candidates": candidates}, reply.usage()))


def _blocked(reply: Reply) -> dict[str, Any]:
    reason = reply.plan.block_reason or "SAFETY"
    feedback: dict[str, Any] = {"blockReason": reason}
    if reason == "SAFETY":
        feedback["safetyRatings"] = safety_ratings("HARM_CATEGORY_DANGEROUS_CONTENT")
    usage = reply.usage(final=False)
    return reply.envelope({"promptFeedback": feedback}, usage)


def stream(plan: Plan, req: GeminiRequest, response_id: str) -> SSEStream:
    """SSE chunks: thought summaries, then code execution, text, function calls (whole,
    in one chunk, as Gemini sends them), each chunk a response with the prompt's usage;
    the last chunk has the finish reason and the whole usage."""
    reply = Reply(plan, req, response_id)
    events: list[bytes] = []
    tokens: list[int] = []

    def add(data: dict[str, Any], count: int = 0) -> None:
        events.append(b"data: " + to_json(data) + b"\r\n\r\n")
        tokens.append(count)

    if plan.block_reason is not None:
        add(_blocked(reply))
        return SSEStream(events, tokens, 0)
    parts = reply.parts()
    last = reply.usage(final=False)
    chunks: list[tuple[list[dict[str, Any]], int]] = []
    for part in parts:
        if "text" in part and part["text"] and "thoughtSignature" not in part:
            base = {k: v for k, v in part.items() if k != "text"}
            chunks.extend(
                ([{**base, "text": p}], count_tokens(p)) for p in stream_pieces(part["text"])
            )
        elif part.get("text"):  # a signed text: pieces, the signature last
            pieces = stream_pieces(part["text"])
            base = {k: v for k, v in part.items() if k not in ("text", "thoughtSignature")}
            chunks.extend(([{**base, "text": p}], count_tokens(p)) for p in pieces)
            chunks.append(([{"text": "", "thoughtSignature": part["thoughtSignature"]}], 0))
        elif "functionCall" in part:
            calls = [p for p in parts if "functionCall" in p]
            if part is calls[0]:
                args = sum(count_tokens(to_json(c["functionCall"]["args"]).decode()) for c in calls)
                chunks.append((calls, args))
        else:
            chunks.append(([part], 0))
    if plan.empty:
        chunks = []
    body_end = max(len(chunks) - 1, 0)
    for index, (chunk, count) in enumerate(chunks):
        final = index == len(chunks) - 1
        candidate = reply.candidate(chunk, final=final)
        add(reply.envelope({"candidates": [candidate]}, reply.usage() if final else last), count)
    if not chunks:
        candidate = reply.candidate([], final=True)
        add(reply.envelope({"candidates": [] if plan.empty else [candidate]}, reply.usage()))
    return SSEStream(events, tokens, body_end)


def _args(arguments: str) -> Any:
    try:
        value = from_json(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _citations(plan: Plan, text: str, req: GeminiRequest) -> dict[str, Any]:
    """The Gemini API's ``citationSources``; Vertex AI's ``citations``."""
    sources = []
    for citation in plan.citations:
        cited = citation.get("cited_text")
        start = text.find(cited) if isinstance(cited, str) and cited else -1
        end = start + len(cited) if start >= 0 and isinstance(cited, str) else len(text)
        source: dict[str, Any] = {"startIndex": max(start, 0), "endIndex": end}
        uri = citation.get("url") or citation.get("uri") or citation.get("source")
        if uri:
            source["uri"] = str(uri)
        if req.vertex and citation.get("title"):
            source["title"] = str(citation["title"])
        sources.append(source)
    return {"citations" if req.vertex else "citationSources": sources}


def _grounding(
    use: dict[str, Any], result: dict[str, Any], text: dict[str, Any] | None
) -> dict[str, Any]:
    """Google Search grounding: the queries, the pages, and what of the text they support."""
    query = str(use["input"].get("query", ""))
    found = result.get("content")
    pages = found if isinstance(found, list) else []
    chunks = [
        {"web": {"uri": str(p.get("url", "")), "title": str(p.get("title", ""))}}
        for p in pages
        if isinstance(p, dict)
    ]
    grounding: dict[str, Any] = {"webSearchQueries": [query], "groundingChunks": chunks}
    words = text["text"] if text is not None else ""
    if chunks and words:
        segment = {"startIndex": 0, "endIndex": len(words.encode()), "text": words}
        indices = list(range(len(chunks)))
        grounding["groundingSupports"] = [{"segment": segment, "groundingChunkIndices": indices}]
    return grounding


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
