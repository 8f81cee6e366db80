"""The streaming tool guard: tool-call JSON a model wrote as text becomes a real call.

Some models (often behind OpenAI-compatible servers) answer a tool request with the
call's JSON in the text, e.g. `{"name": "search", "arguments": {...}}` or inside
`<tool_call>` tags. With the guard on, such text is held back while streaming (up to a
bounded buffer), parsed when the reply is complete, and turned into tool calls that are
de-duplicated against the real ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .messages import ToolCall

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TAG = "<tool_call>"
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")


class GuardBuffer:
    """Holds back streamed text while it may still be a tool call, up to `max_chars`."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._held: list[str] = []
        self._size = 0
        self._guarding = True

    def feed(self, text: str) -> str:
        """The text to pass on now ("" while holding)."""
        if not self._guarding:
            return text
        self._held.append(text)
        self._size += len(text)
        head = "".join(self._held).lstrip()
        if not head:
            return ""
        if self._size > self.max_chars or not _may_be_call(head):
            self._guarding = False
            return self.release(True)
        return ""

    def release(self, keep: bool) -> str:
        """Empty the buffer: its text if `keep` (it was not a tool call), else nothing."""
        held = "".join(self._held)
        self._held.clear()
        return held if keep else ""


def _may_be_call(head: str) -> bool:
    if head.startswith(("{", "[", "```", _TAG)):
        return True
    return _TAG.startswith(head[: len(_TAG)])


def extract_tool_calls(
    text: str, tools: Mapping[str, Any], existing: Sequence[ToolCall]
) -> tuple[str, list[ToolCall]] | None:
    """(text left over, new calls) when `text` holds tool-call JSON for known tools."""
    stripped = text.strip()
    tagged = _TAGGED.findall(stripped)
    if tagged:
        payloads, rest = tagged, _TAGGED.sub("", stripped).strip()
    elif stripped.startswith(("{", "[", "```")):
        fenced = _FENCE.match(stripped)
        payloads, rest = [fenced.group(1) if fenced else stripped], ""
    else:
        return None
    calls: list[ToolCall] = []
    for payload in payloads:
        parsed = _calls_in(payload, tools)
        if parsed is None:
            return None
        calls.extend(parsed)
    seen = {(c.name, json.dumps(c.arguments, sort_keys=True)) for c in existing}
    fresh = []
    for call in calls:
        key = (call.name, json.dumps(call.arguments, sort_keys=True))
        if key not in seen:
            seen.add(key)
            fresh.append(call)
    return rest, fresh


def _calls_in(payload: str, tools: Mapping[str, Any]) -> list[ToolCall] | None:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = []
    for position, item in enumerate(items):
        if not isinstance(item, dict) or item.get("name") not in tools:
            return None
        raw: Any = next((item[k] for k in _ARGUMENT_KEYS if k in item), {})
        text = raw if isinstance(raw, str) else json.dumps(raw)
        digest = hashlib.sha1(f"{position}:{item['name']}:{text}".encode()).hexdigest()[:16]
        calls.append(ToolCall.parse(f"call_guard_{digest}", item["name"], text))
    return calls
