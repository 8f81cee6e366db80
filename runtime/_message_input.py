"""Messages given from outside, read into raygent messages in one place.

Wherever a caller hands raygent a conversation (`history=`, a run's input, a
compaction summary, a store append, a test model's request), it may give raygent
messages, raygent's own message dicts (what `Message` models dump to), or plain dicts
in the OpenAI chat shape or with Anthropic content blocks. Anything else is an
`InvalidOptionsError` naming the option and the offending index, raised before any
request is sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from pydantic import ValidationError

from .errors import InvalidOptionsError
from .messages import (
    MESSAGE_ADAPTER,
    MESSAGE_TYPES,
    AssistantMessage,
    Message,
    ProviderBlock,
    ToolMessage,
    UserMessage,
    parse_arguments,
)

__all__ = [
    "MessageLike",
    "as_message",
    "as_messages",
    "check_answered",
    "given_messages",
    "run_input",
]

MessageLike: TypeAlias = "Message | Mapping[str, Any]"

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_TAGS = [(role,) for role in (*_ROLES, "tool")]  # the union's tag leading an error's loc
# Fields the SDKs' own dumps carry that raygent has no use for, dropped when empty.
_EMPTY_EXTRAS = ("refusal", "function_call", "audio", "annotations")
# Marks on a content block meant for the provider that made them (cache marks,
# citations): raygent's parts have no place for them (cache_control= is a run option).
_DROPPED = ("cache_control", "citations")
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)


class _Bad(ValueError):
    """What is wrong with one message (the caller adds where it is)."""


def as_messages(value: Any, option: str) -> list[Message]:
    """`value` (a list of messages or message dicts) as raygent messages.

    Raises InvalidOptionsError naming `option` and the index of the offending item
    (`history[3]: ...`); one Anthropic user turn of tool results becomes one
    ToolMessage per result.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidOptionsError(
            f"{option} must be a list of messages, not {type(value).__name__}",
            option=option,
        )
    messages: list[Message] = []
    for index, item in enumerate(value):
        messages.extend(_read(item, f"{option}[{index}]", option, index))
    return _named_results(messages)


def check_answered(messages: Sequence[Message], option: str, after: Sequence[Message] = ()) -> None:
    """Raise InvalidOptionsError at the first assistant turn of `messages` with a tool call
    that no tool result answers right after it (in `messages`, then `after`): the
    providers refuse such a conversation (400), so it is said before any request."""
    following = [*messages, *after]
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        answered = set()
        for later in following[index + 1 :]:
            if not isinstance(later, ToolMessage):
                break
            answered.add(later.call_id)
        for call in message.tool_calls:
            if call.call_id not in answered:
                raise InvalidOptionsError(
                    f"{option}[{index}]: tool call {call.call_id!r} has no result",
                    option=option,
                )


def given_messages(value: Any, option: str = "messages") -> Sequence[Message]:
    """`value` as it is when it holds raygent messages only (the agent's own calls, on
    the hot path), else read by `as_messages`."""
    if isinstance(value, (list, tuple)) and all(isinstance(m, MESSAGE_TYPES) for m in value):
        return value
    return as_messages(value, option)


def _named_results(messages: list[Message]) -> list[Message]:
    """Tool results name their tool, from the call they answer (neither foreign shape
    says it on the result)."""
    names: dict[str, str] = {}
    named: list[Message] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            names.update((c.call_id, c.name) for c in message.tool_calls)
        elif isinstance(message, ToolMessage) and message.name is None:
            name = names.get(message.call_id)
            if name is not None:
                message = message.model_copy(update={"name": name})
        named.append(message)
    return named


def as_message(value: Any, option: str) -> Message:
    """One message (or message dict) as a raygent message; `option` names it in errors."""
    read = _read(value, option, option, None)
    if len(read) != 1:
        raise InvalidOptionsError(f"{option}: expected one message, got {len(read)}", option=option)
    return read[0]


def _read(item: Any, where: str, option: str, index: int | None) -> list[Message]:
    if isinstance(item, MESSAGE_TYPES):
        return [item]
    try:
        if not isinstance(item, Mapping):
            raise _Bad(f"expected a message or a message dict, not {type(item).__name__}")
        return _from_dict(item)
    except (_Bad, ValidationError) as exc:
        reason = _validation_reason(exc) if isinstance(exc, ValidationError) else str(exc)
        details: dict[str, Any] = {"option": option}
        if index is not None:
            details["index"] = index
        raise InvalidOptionsError(f"{where}: {reason}", **details) from None


def _validation_reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    path = first["loc"][1:] if first["loc"][:1] in _TAGS else first["loc"]
    loc = ".".join(str(p) for p in path)
    return f"{loc}: {first['msg']}" if loc else str(first["msg"])


def _from_dict(raw: Mapping[str, Any]) -> list[Message]:
    role = raw.get("role")
    if not isinstance(role, str):
        raise _Bad(f"a message needs a role (a str), got {role!r}")
    fields = {k: v for k, v in raw.items() if not (k in _EMPTY_EXTRAS and not v)}
    if role == "tool":
        return [_tool_message(fields)]
    if role not in _ROLES:
        raise _Bad(f"unknown role {role!r} (system, developer, user, assistant or tool)")
    fields["role"] = _ROLES[role]
    if role != "assistant":
        fields.pop("name", None)  # an OpenAI participant name: no place for it
    if role == "user" and _has_tool_results(fields.get("content")):
        return _anthropic_tool_results(fields)
    if role == "assistant":
        return [_assistant(fields)]
    fields["content"] = _content(fields.get("content"), role)
    return [MESSAGE_ADAPTER.validate_python(fields)]


def _assistant(fields: dict[str, Any]) -> Message:
    fields.pop("name", None)
    calls = fields.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _Bad(f"tool_calls must be a list, not {type(calls).__name__}")
    tool_calls = [_openai_call(c, i) for i, c in enumerate(calls)]
    parts = []
    for part in _parts(fields.get("content")):
        if isinstance(part, Mapping) and part.get("type") == "tool_use":
            tool_calls.append(_anthropic_call(part))
        else:
            parts.append(part)
    # The reference's replay form: {"role": "assistant", "content": text, "blocks":
    # result.blocks}. The blocks (signed thinking) lead the turn, as the model sent it.
    blocks = _replayed_blocks(fields.pop("blocks", None))
    fields["content"] = [*blocks, *(_part(p, "assistant") for p in parts)]
    fields["tool_calls"] = tool_calls
    return MESSAGE_ADAPTER.validate_python(fields)


def _replayed_blocks(blocks: Any) -> list[Any]:
    if blocks is None:
        return []
    if not isinstance(blocks, list):
        raise _Bad(f"blocks must be a list of provider blocks, not {type(blocks).__name__}")
    out: list[Any] = []
    for index, block in enumerate(blocks):
        if isinstance(block, ProviderBlock):
            out.append(block)
        elif isinstance(block, Mapping) and block.get("type", "provider") == "provider":
            out.append({**block, "type": "provider"})
        else:
            raise _Bad(f"blocks[{index}] must be a provider block (result.blocks)")
    return out


def _openai_call(call: Any, index: int) -> Any:
    if not isinstance(call, Mapping):
        raise _Bad(f"tool_calls[{index}] must be a dict, not {type(call).__name__}")
    if "function" not in call:
        return call  # raygent's own ToolCall dict: validated as one
    function = call["function"]
    if not isinstance(function, Mapping):
        raise _Bad(f"tool_calls[{index}].function must be a dict")
    name, call_id = function.get("name"), call.get("id")
    if not isinstance(name, str) or not name:
        raise _Bad(f"tool_calls[{index}] has no function name")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad(f"tool_calls[{index}] has no id")
    arguments = function.get("arguments") or ""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "call_id": call_id,
        "name": name,
        "arguments_text": arguments,
        "arguments": parse_arguments(arguments),
    }


def _anthropic_call(block: Mapping[str, Any]) -> dict[str, Any]:
    name, call_id, arguments = block.get("name"), block.get("id"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise _Bad("a tool_use block has no name")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad("a tool_use block has no id")
    if not isinstance(arguments, Mapping):
        raise _Bad("a tool_use block's input must be an object")
    return {
        "call_id": call_id,
        "name": name,
        "arguments_text": json.dumps(arguments),
        "arguments": dict(arguments),
    }


def _tool_message(fields: dict[str, Any]) -> Message:
    if "tool_call_id" in fields:  # the OpenAI shape
        fields["call_id"] = fields.pop("tool_call_id")
    call_id = fields.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad("a tool message needs a tool_call_id (a non-empty str)")
    fields["content"] = _content(fields.get("content"), "tool")
    return MESSAGE_ADAPTER.validate_python(fields)


def _has_tool_results(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") == "tool_result" for p in content
    )


def _anthropic_tool_results(fields: dict[str, Any]) -> list[Message]:
    """A user turn of tool_result blocks: one ToolMessage per result, then any other
    content as a user message after them."""
    results: list[Message] = []
    rest: list[Any] = []
    for block in fields["content"]:
        if not (isinstance(block, Mapping) and block.get("type") == "tool_result"):
            rest.append(block)
            continue
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Bad("a tool_result block needs a tool_use_id (a non-empty str)")
        is_error = block.get("is_error", False)
        if not isinstance(is_error, bool):
            raise _Bad("a tool_result block's is_error must be a bool")
        content = _content(block.get("content"), "tool")
        results.append(ToolMessage(call_id=call_id, content=content, is_error=is_error))
    if rest:
        results.append(UserMessage(content=[_part(p, "user") for p in rest]))
    return results


def _parts(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _Bad(f"content must be a str or a list of parts, not {type(content).__name__}")
    return content


def _content(content: Any, role: str) -> list[Any]:
    return [_part(p, role) for p in _parts(content)]


def _part(part: Any, role: str) -> Any:
    if not isinstance(part, Mapping):
        raise _Bad(f"a content part must be a dict, not {type(part).__name__}")
    kind = part.get("type")
    if kind == "text":
        return {k: v for k, v in part.items() if k not in _DROPPED}
    if kind == "image_url":  # OpenAI
        return _openai_image(part.get("image_url"))
    if kind == "image" and "source" in part:  # Anthropic
        return _anthropic_image(part["source"])
    if kind in ("thinking", "redacted_thinking") and role == "assistant":
        # Signed reasoning: kept verbatim for the Anthropic adapter to replay.
        return {"type": "provider", "provider": "anthropic", "kind": kind, "data": dict(part)}
    if kind in ("text", "image", "provider"):
        return part
    raise _Bad(f"unknown content part type {kind!r}")


def _openai_image(image: Any) -> dict[str, Any]:
    url = image.get("url") if isinstance(image, Mapping) else image
    if not isinstance(url, str) or not url:
        raise _Bad("an image_url part needs a url")
    return _image_of_url(url)


def _image_of_url(url: str) -> dict[str, Any]:
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return {"type": "image", "url": url}
    return {"type": "image", "data": match["data"], "media_type": match["type"]}


def _anthropic_image(source: Any) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        raise _Bad("an image block's source must be a dict")
    kind = source.get("type")
    if kind == "base64":
        return {"type": "image", "data": source.get("data"), "media_type": source.get("media_type")}
    if kind == "url":
        return {"type": "image", "url": source.get("url")}
    raise _Bad(f"unknown image source type {kind!r} (base64 or url)")


def run_input(input: Any) -> list[Message]:
    """A run's input as messages: text, a message (or its dict), a list of messages, or
    a list of content parts (one user message)."""
    if isinstance(input, str):
        return [UserMessage(content=input)]
    if hasattr(input, "role"):
        return [input]
    if isinstance(input, Mapping) and "role" in input:
        return as_messages([input], "input")
    if isinstance(input, (bytes, Mapping)) or not isinstance(input, Iterable):
        raise InvalidOptionsError(
            "input: expected text, a message, a list of messages or of content parts, "
            f"not {type(input).__name__}",
            option="input",
        )
    items = list(input)
    if items and all(hasattr(i, "role") or (isinstance(i, Mapping) and "role" in i) for i in items):
        return as_messages(items, "input")
    return [UserMessage(content=items)]
