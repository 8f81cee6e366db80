"""A conversation slice as a tagged transcript for a summariser model.

Text, tool calls and tool results go in; reasoning and other provider blocks stay out
(signed reasoning means nothing outside its own turn, and it is not the summariser's to
read). Images are noted, not sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import AssistantMessage, ImagePart, Message, TextPart, ToolMessage

__all__ = ["render_transcript"]


def render_transcript(messages: Sequence[Message]) -> str:
    """`<transcript>` with one tagged element per message, in order."""
    lines = ["<transcript>"]
    lines.extend(_render(message) for message in messages)
    lines.append("</transcript>")
    return "\n".join(lines)


def _render(message: Message) -> str:
    body = _body(message)
    if isinstance(message, ToolMessage):
        error = ' error="true"' if message.is_error else ""
        name = f' name="{message.name}"' if message.name else ""
        return f'<tool_result id="{message.call_id}"{name}{error}>{body}</tool_result>'
    if isinstance(message, AssistantMessage):
        calls = "".join(
            f'\n<tool_call id="{c.call_id}" name="{c.name}">{c.arguments_text}</tool_call>'
            for c in message.tool_calls
        )
        return f"<assistant>{body}{calls}</assistant>"
    return f"<{message.role}>{body}</{message.role}>"


def _body(message: Message) -> str:
    pieces = []
    for part in message.content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ImagePart):
            pieces.append("[image]")
    return "".join(pieces)
