"""The streaming tool guard: tool-call JSON a model wrote as text becomes a real call.

Some models (often behind OpenAI-compatible servers) answer a tool request with the
call's JSON in the text, e.g. `{"name": "search", "arguments": {...}}` or inside
`<tool_call>` tags. With the guard on, such text is held back while streaming (up to a
bounded buffer), parsed when the reply is complete, and turned into tool calls that are
de-duplicated against the real ones.

`streaming_tool_guard=` (on the agent, or per call over the agent's) takes `True` or `{}`
(on, with defaults), `{"max_buffer": n}` or `n` (on, holding back at most n characters),
`False` (off); `None` is off on an agent and "the agent's" on a call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from ..errors import InvalidOptionsError
from ..messages import ToolCall

__all__ = [
    "GuardBuffer",
    "GuardSetting",
    "StreamingToolGuard",
    "extract_tool_calls",
    "guard_buffer",
]

DEFAULT_MAX_BUFFER = 16_384


class StreamingToolGuard(TypedDict, total=False):
    """The guard's configuration; `{}` is the guard on with its defaults."""

    max_buffer: int  # characters held back at most while text may be a tool call


GuardSetting = bool | int | StreamingToolGuard | None


def guard_buffer(setting: GuardSetting) -> int | None:
    """The buffer size a `streaming_tool_guard=` value asks for (None: the guard is off).
    Anything but the accepted forms is an InvalidOptionsError."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return DEFAULT_MAX_BUFFER
    if isinstance(setting, int):
        return _positive(setting)
    if isinstance(setting, Mapping):
        unknown = sorted(str(key) for key in setting if key != "max_buffer")
        if unknown:
            raise InvalidOptionsError(
                f"streaming_tool_guard: unknown key(s) {unknown}; the config takes max_buffer"
            )
        return _positive(setting.get("max_buffer", DEFAULT_MAX_BUFFER))
    raise InvalidOptionsError(
        "streaming_tool_guard takes True, False, None, a buffer size or "
        f"{{'max_buffer': n}}, not {setting!r}"
    )


def _positive(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidOptionsError(
            f"streaming_tool_guard: the buffer size is a positive int of characters, not {size!r}"
        )
    return size


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TAG = "<tool_call>"
_JSON_STARTS = ("{", "[", "```")
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")


class GuardBuffer:
    """Holds back streamed text while it may be (the start of) a tool call written as
    text: a reply that opens with JSON, or a `<tool_call>` tag anywhere. Past `max_chars`
    of text the reply is no longer guarded and flows on as it comes."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._held = ""
        self._sent: list[str] = []
        self._size = 0
        self._guarding = True

    def feed(self, text: str) -> str:
        """The text to pass on now (possibly "")."""
        self._size += len(text)
        if not self._guarding:
            return self._pass(text)
        self._held += text
        if self._size > self.max_chars:
            self._guarding = False
            held, self._held = self._held, ""
            return self._pass(held)
        start = self._hold_from(self._held)
        out, self._held = self._held[:start], self._held[start:]
        return self._pass(out)

    def finish(self, final_text: str) -> str:
        """What is left to pass on once the reply is complete. `final_text` is the
        reply's text after any tool-call JSON was taken out of it."""
        sent = "".join(self._sent)
        self._held = ""
        # What was passed on never holds a call, so it is a prefix of the final text.
        return self._pass(final_text[len(sent) :] if final_text.startswith(sent) else "")

    def _pass(self, text: str) -> str:
        if text:
            self._sent.append(text)
        return text

    def _hold_from(self, held: str) -> int:
        """Where the text that may still be a tool call starts."""
        if not self._sent and (not held.strip() or held.lstrip().startswith(_JSON_STARTS)):
            return 0  # the reply opens with JSON (or nothing yet)
        tag = held.find(_TAG)
        if tag < 0:
            tag = _partial_tag(held)
        # Whitespace before a call goes with it (the final text is stripped there).
        while tag > 0 and held[tag - 1].isspace():
            tag -= 1
        return tag


def _partial_tag(text: str) -> int:
    """Where a tail of `text` that could be the beginning of a tag starts (else its end)."""
    for start in range(max(0, len(text) - len(_TAG) + 1), len(text)):
        if _TAG.startswith(text[start:]):
            return start
    return len(text)


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
