"""Test doubles and data shared by several test folders (tests/ is on sys.path through
its conftest): every message shape, a model step that hangs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from raygent import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelOptions,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from raygent.testing import hang

THINKING = {
    "type": "thinking",
    "thinking": "Let me add 2 and 2. ünïcødé ✓",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}

MESSAGE_SHAPES: dict[str, Message] = {
    "system": SystemMessage(content="You are terse."),
    "system-empty": SystemMessage(),
    "user-text": UserMessage(content="hello"),
    "user-multipart": UserMessage(content=[TextPart(text="look:"), TextPart(text=" twice")]),
    "user-image-url": UserMessage(
        content=[TextPart(text="what is it?"), ImagePart(url="https://example.com/cat.png")]
    ),
    "user-image-base64": UserMessage(
        content=[ImagePart(data="iVBORw0KGgo=", media_type="image/png")]
    ),
    "user-image-path": UserMessage(content=[ImagePart(path="./images/cat.jpg")]),
    "assistant-text": AssistantMessage(content="Hi."),
    "assistant-tool-calls": AssistantMessage(
        content="Looking it up.",
        tool_calls=[
            ToolCall.parse("call_1", "search", '{"q": "ray", "limit": 3}'),
            ToolCall.parse("call_2", "calc", '{"expr": "2+2", "nested": {"a": [1, 2.5, null]}}'),
        ],
    ),
    "assistant-malformed-args": AssistantMessage(
        tool_calls=[ToolCall.parse("call_3", "search", '{"q": "unterminated')]
    ),
    "assistant-thinking": AssistantMessage(
        content=[
            ProviderBlock(provider="anthropic", kind="thinking", data=THINKING),
            ProviderBlock(provider="anthropic", kind="redacted_thinking", data=REDACTED),
            TextPart(text="4"),
        ]
    ),
    "tool-result": ToolMessage(call_id="call_1", name="search", content="3 results"),
    "tool-error": ToolMessage(call_id="call_2", content="division by zero", is_error=True),
}


class Gate:
    """A model step that says when the request arrived, then hangs until aborted."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    def __call__(self, messages: list[Message], options: ModelOptions) -> Any:
        self.arrived.set()
        return hang()


def driver_env(backend: str) -> dict[str, str]:
    """The environment of a driver process of its own, on `backend` ("local", or "ray":
    the test session's Ray, which the caller has started)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAYGENT_BACKEND"] = backend
    if backend == "ray":
        import ray

        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return env


async def until(condition: Callable[[], object], timeout: float = 120.0) -> None:
    """Wait (bounded) until `condition()` holds, polling: for a state another process
    writes (a file, a sink), where there is nothing to await."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "not reached in time"
        await asyncio.sleep(0.01)
